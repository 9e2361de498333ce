import { expect } from "chai";
import { accountTotalCents } from "../../core/ledger/reads.js";
import { IN_FLIGHT_ACCOUNT } from "../../core/settlement/ledger.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { RpcProxy } from "../support/anvil.js";
import { payOnBase, startProxiedEvmStack, type ProxiedEvmStack } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * Receipts a node does not give (one behind the head, one without a transaction index): a transfer
 * that was mined is never refunded nor taken for reorged, and one a reorg takes back and returns is booked once.
 */
describe("a node that gives no receipt for a mined transfer (anvil)", function () {
  this.timeout(120_000);
  let chain: ProxiedEvmStack<McpStack>;
  let proxy: RpcProxy;
  let stack: McpStack;

  before(async () => {
    // Its own books: the in-flight total it checks would count other files' payments in the shared database.
    chain = await startProxiedEvmStack(startMcpStack, 100_000, { settings: { finalityBlocks: 50 }, ownBooks: true });
    ({ proxy, stack } = chain);
  });
  after(async () => {
    await chain?.stop();
  });

  const status = async (id: string) => (await stack.core.db("settlement_payments").where({ payment_id: id }).first()).status as string;

  const row = async (id: string) => stack.core.db("settlement_payments").where({ payment_id: id }).first();
  const settlementActions = async (id: string) =>
    stack.core.db("audit_records").where({ subject: id }).whereLike("action", "payments.settlement.%").orderBy("seq").pluck("action");

  it("a node behind the block of a completed transfer (no receipt, no block at that height) is no evidence of a reorg: it stays completed, booked once", async () => {
    const [id] = await payOnBase(stack, chain.anvil, [1_250]);
    expect(await status(id!)).to.equal("completed");
    proxy.mode = "behind";
    try {
      await stack.core.settlement.worker.runOnce();
      await stack.core.settlement.worker.runOnce();
      expect(await status(id!), "nothing seen is not a reorg").to.equal("completed");
    } finally {
      proxy.mode = "pass";
    }
    await chain.anvil.mine(60);
    await stack.core.settlement.worker.runOnce();
    expect([(await row(id!)).status, (await row(id!)).final]).to.deep.equal(["completed", true]);
    expect(await settlementActions(id!)).to.deep.equal(["payments.settlement.submitted", "payments.settlement.completed"]);
  });

  it("a head read from a replica below the transfer's block is no evidence: its confirmations never go below zero", async () => {
    const [id] = await payOnBase(stack, chain.anvil, [1_300]);
    const before = await row(id!);
    expect([before.status, before.final]).to.deep.equal(["completed", false]);
    proxy.mode = "stale-head";
    try {
      await stack.core.settlement.worker.runOnce();
    } finally {
      proxy.mode = "pass";
    }
    const after = await row(id!);
    expect([after.status, after.confirmations], "a lagging head changes nothing").to.deep.equal(["completed", before.confirmations]);
    await chain.anvil.mine(60);
    await stack.core.settlement.worker.runOnce();
    expect([(await row(id!)).status, (await row(id!)).final]).to.deep.equal(["completed", true]);
  });

  it("a transfer a reorg takes back and the same bytes put back, twice: the amount moves back to in-flight and out again, each time once", async () => {
    const [id] = await payOnBase(stack, chain.anvil, [1_500]);
    for (let round = 0; round < 2; round++) {
      const before = await row(id!);
      expect(before.status).to.equal("completed");
      const head = Number(await chain.anvil.client.getBlockNumber({ cacheTime: 0 }));
      await chain.anvil.setAutomine(false);
      try {
        await chain.anvil.rpc("anvil_reorg", [head - Number(before.mined_block) + 1, []]);
        await stack.core.settlement.worker.runOnce();
        expect(await status(id!), "its block is gone: submitted again").to.equal("submitted");
        await stack.core.settlement.worker.runOnce(); // the same bytes again
        await chain.anvil.mine(2);
        await stack.core.settlement.worker.runOnce();
        expect(await status(id!)).to.equal("completed");
        expect((await row(id!)).tx_hash).to.equal(before.tx_hash);
      } finally {
        await chain.anvil.setAutomine(true);
      }
    }
    expect(await chain.anvil.usdcBalance(chain.usdc, (await row(id!)).recipient)).to.equal(centsToUnits(1_500));
    const inFlight = await accountTotalCents(stack.core.db, { kind: "external", owner: IN_FLIGHT_ACCOUNT, currency: "USD" });
    expect(inFlight, "nothing waits in flight").to.equal(0n);
    const r = await stack.admin.audit.verifyChains({});
    expect(r.differences.map((d) => d.message)).to.deep.equal([]);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("a completed transfer whose block the chain still has stays completed without its receipt, and becomes final; completed once", async () => {
    const [id] = await payOnBase(stack, chain.anvil, [300]);
    proxy.mode = "no-receipts";
    try {
      await stack.core.settlement.worker.runOnce();
      expect(await status(id!)).to.equal("completed");
      await chain.anvil.mine(60);
      await stack.core.settlement.worker.runOnce();
      const row = await stack.core.db("settlement_payments").where({ payment_id: id }).first();
      expect([row.status, row.final]).to.deep.equal(["completed", true]);
    } finally {
      proxy.mode = "pass";
    }
    const actions = await stack.core.db("audit_records").where({ subject: id }).whereLike("action", "payments.settlement.%").orderBy("seq").pluck("action");
    expect(actions).to.deep.equal(["payments.settlement.submitted", "payments.settlement.completed"]);
  });

  it("a mined transfer the node gives no receipt for is never failed as dropped, however deep; with receipts back it completes, paid once", async () => {
    proxy.mode = "no-receipts";
    try {
      const [id] = await payOnBase(stack, chain.anvil, [700]);
      await chain.anvil.mine(60); // its nonce is used in a final block, and the node names no receipt of ours
      await stack.core.settlement.worker.runOnce();
      await stack.core.settlement.worker.runOnce();
      expect(await status(id!), "no evidence another transaction took the nonce").to.equal("submitted");
      proxy.mode = "pass";
      await stack.core.settlement.worker.runOnce();
      expect(await status(id!)).to.equal("completed");
      const row = await stack.core.db("settlement_payments").where({ payment_id: id }).first();
      expect(await chain.anvil.usdcBalance(chain.usdc, row.recipient)).to.equal(centsToUnits(700));
      expect((await stack.admin.audit.verifyChains({})).differences.map((d) => d.message)).to.deep.equal([]);
      expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
    } finally {
      proxy.mode = "pass";
    }
  });
});
