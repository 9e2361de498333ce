import { expect } from "chai";
import { accountTotalCents } from "../../core/ledger/reads.js";
import { IN_FLIGHT_ACCOUNT } from "../../core/settlement/ledger.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { startRpcProxy } from "../support/anvil.js";
import { ownDatabase } from "../support/db.js";
import { payOnBase, startEvmChain, evmRailStackOptions, fundHotWallet, type EvmChain } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * Receipts a node does not give (one behind the head, one without a transaction index): a transfer
 * that was mined is never refunded, and one that leaves and comes back in the same block is booked once.
 */
describe("a node that gives no receipt for a mined transfer (anvil)", function () {
  this.timeout(120_000);
  let chain: EvmChain;
  let proxy: Awaited<ReturnType<typeof startRpcProxy>>;
  let stack: McpStack;
  // Its own books: the in-flight total it checks would count other files' payments in the shared database.
  let books: Awaited<ReturnType<typeof ownDatabase>>;

  before(async () => {
    books = await ownDatabase();
    chain = await startEvmChain();
    proxy = await startRpcProxy(chain.anvil.url);
    const options = evmRailStackOptions({ ...chain.settings, rpcUrl: proxy.url, finalityBlocks: 50 });
    stack = await startMcpStack({ ...options, database: books.db });
    await fundHotWallet(chain.anvil, chain.usdc, stack.core.settlement.evm("base")!.wallet, centsToUnits(100_000));
  });
  after(async () => {
    await stack?.close();
    await proxy?.stop();
    await chain?.anvil.stop();
    await books?.drop();
  });

  const status = async (id: string) => (await stack.core.db("settlement_payments").where({ payment_id: id }).first()).status as string;

  it("a completed transfer whose receipt leaves and comes back in its block: moves the amount back to in-flight and out to the hot wallet again, each time once", async () => {
    const [id] = await payOnBase(stack, chain.anvil, [1_250]);
    expect(await status(id!)).to.equal("completed");
    for (let round = 0; round < 2; round++) {
      proxy.mode = "behind";
      await stack.core.settlement.worker.runOnce();
      expect(await status(id!), "the receipt and the block are gone: submitted again").to.equal("submitted");
      proxy.mode = "pass";
      await stack.core.settlement.worker.runOnce();
      expect(await status(id!), "the same receipt, in the same block").to.equal("completed");
    }
    const inFlight = await accountTotalCents(stack.core.db, { kind: "external", owner: IN_FLIGHT_ACCOUNT, currency: "USD" });
    expect(inFlight, "nothing waits in flight").to.equal(0n);
    const r = await stack.admin.audit.verifyChains({});
    expect(r.differences.map((d) => d.message)).to.deep.equal([]);
    expect(r.chains[0]).to.deep.include({ outgoingUnits: `${centsToUnits(1_250)}`, ledgerOutflowUnits: `${centsToUnits(1_250)}` });
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
