import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { coreRegistry } from "../../core/observability/metrics.js";
import { TRANSFER_GAS } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { Anvil } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { evmRailStackOptions, freshAddress, startEvmRailStack, type EvmChain } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/** A hot wallet with USDC but no ETH for gas: payments wait unsigned, go out once it has gas, or fail refunded at expiry. */
describe("a hot wallet without gas (anvil)", function () {
  this.timeout(120_000);
  let chain: EvmChain & { stack: McpStack; wallet: string };
  let stack: McpStack;
  let anvil: Anvil;
  const others: McpStack[] = [];

  before(async () => {
    chain = await startEvmRailStack(startMcpStack, 10_000_000);
    ({ stack, anvil } = chain);
  });
  beforeEach(async () => {
    await anvil.fundGas(chain.wallet, 0n);
  });
  afterEach(async () => {
    await Promise.all(others.splice(0).map((s) => s.close()));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  /** Another core on the same database and hot wallet: a restarted or second replica. */
  async function otherCore(): Promise<McpStack> {
    const s = await startMcpStack(evmRailStackOptions(chain.settings));
    others.push(s);
    return s;
  }

  async function pay(count: number, amountCents = 700) {
    const { vaultId, agentToken } = await fundedChildBudget(stack, {
      fundCents: 100_000n,
      budget: { display_name: "Chain budget", chain_allowlist: ["base"] },
    });
    const rpc = stackRpc(stack);
    const payees = Array.from({ length: count }, () => freshAddress());
    const ids = await Promise.all(
      payees.map(async (to) => {
        const r = await rpc("/mcp/write", agentToken, "payments.initiate", {
          counterparty: { address: to, chain: "base", token: "USDC" },
          amount_cents: amountCents,
          currency: "USD",
          idempotency_key: `p-${randomBytes(6).toString("hex")}`,
        });
        return r.json!.result.payment_id as string;
      }),
    );
    const balance = async () => (await rpc("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents as number;
    return { vaultId, ids, payees, balance };
  }

  const row = async (id: string) => stack.core.db("settlement_payments").where({ payment_id: id }).first();
  const sentByWallet = () => anvil.client.getTransactionCount({ address: chain.wallet as `0x${string}` });
  const verify = async () => (await stack.admin.audit.verifyLedger({})).discrepancies;
  const count = async (q: Promise<{ n: string | number }[]>) => Number((await q)[0]!.n);
  const failedAudits = (id: string) => count(stack.core.db("audit_records").where({ subject: id, action: "payments.settlement.failed" }).count({ n: "*" }));

  it("waits unsigned while the wallet has no gas, says so in a metric and a log line, and goes out once when gas arrives", async () => {
    const { ids, payees } = await pay(1);
    const [id] = ids;
    for (let i = 0; i < 3; i++) await stack.core.settlement.worker.runOnce();
    const waiting = await row(id!);
    expect(waiting.status, "a payment the wallet cannot pay gas for is never signed").to.equal("pending");
    expect(waiting.nonce).to.equal(null);
    expect(await coreRegistry.getSingleMetricAsString("vaultgate_settlement_hot_wallet_gas_eth")).to.match(/chain="base"\} 0(\n|$)/);
    expect(await coreRegistry.getSingleMetricAsString("vaultgate_settlement_no_gas_total")).to.match(/chain="base"\} [1-9]/);
    const line = stack.logs.lines.find((l) => l.includes("no ETH for gas"));
    expect(line, "a log line names the hot wallet that lacks gas").to.include(chain.wallet);
    expect(line).to.not.include((await import("node:fs")).readFileSync(chain.keyFile, "utf8").trim().slice(2));

    await anvil.fundGas(chain.wallet);
    await stack.core.settlement.worker.runOnce();
    await anvil.mine(2);
    await stack.core.settlement.worker.runOnce();
    expect((await row(id!)).status).to.equal("completed");
    expect(await anvil.usdcBalance(chain.usdc, payees[0]!)).to.equal(centsToUnits(700));
    expect(await count(stack.core.db("settlement_transactions").where({ payment_id: id }).count({ n: "*" }))).to.equal(1);
    expect(await verify()).to.deep.equal([]);
  });

  it("past its expiry without gas it fails as expired and is refunded once, also by a restarted core; nothing is ever sent", async () => {
    const before = await sentByWallet();
    const { ids, payees, balance } = await pay(1);
    const [id] = ids;
    await stack.core.settlement.worker.runOnce();
    expect(await balance()).to.equal(99_300);

    const restarted = await otherCore();
    restarted.clock.advance(3_600_000);
    for (let i = 0; i < 3; i++) await restarted.core.settlement.worker.runOnce();
    expect(await row(id!)).to.deep.include({ status: "failed", failure_reason: "expired" });
    expect(await balance()).to.equal(100_000);
    expect(await failedAudits(id!)).to.equal(1);

    const again = await otherCore();
    again.clock.advance(3_600_000);
    await anvil.fundGas(chain.wallet);
    for (let i = 0; i < 3; i++) await again.core.settlement.worker.runOnce();
    await anvil.mine(2);
    await again.core.settlement.worker.runOnce();
    expect(await balance()).to.equal(100_000);
    expect(await sentByWallet(), "a refunded payment never leaves").to.equal(before);
    expect(await anvil.usdcBalance(chain.usdc, payees[0]!)).to.equal(0n);
    expect(await failedAudits(id!)).to.equal(1);
    expect(await verify()).to.deep.equal([]);
  });

  it("gas for three transfers and two cores signing at once: three go out, the rest wait unsigned, then all are paid once (PostgreSQL only)", async function () {
    requirePostgres(this, "two cores racing for one wallet's gas need a shared server");
    const { ids, payees } = await pay(10, 200);
    const a = await otherCore();
    const b = await otherCore();
    await anvil.setAutomine(false);
    try {
      const fees = await stack.core.settlement.evm("base")!.fees();
      await anvil.fundGas(chain.wallet, 3n * TRANSFER_GAS * fees.maxFeePerGas + 1n);
      await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).core.settlement.worker.runOnce()));
      const statuses = await stack.core.db("settlement_payments").whereIn("payment_id", ids).select("status");
      expect(statuses.filter((r: { status: string }) => r.status === "submitted")).to.have.length(3);
      expect(statuses.filter((r: { status: string }) => r.status === "pending")).to.have.length(7);
    } finally {
      await anvil.setAutomine(true);
    }
    await anvil.fundGas(chain.wallet);
    for (let i = 0; i < 4; i++) {
      await Promise.all([a, b].map((s) => s.core.settlement.worker.runOnce()));
      await anvil.mine(1);
    }
    await a.core.settlement.worker.runOnce();
    const done = await stack.core.db("settlement_payments").whereIn("payment_id", ids).select("status");
    expect(done.map((r: { status: string }) => r.status)).to.deep.equal(ids.map(() => "completed"));
    const paid = await Promise.all(payees.map((to) => anvil.usdcBalance(chain.usdc, to)));
    expect(paid).to.deep.equal(payees.map(() => centsToUnits(200)));
    expect(await verify()).to.deep.equal([]);
  });

  it("many payments and two cores racing past expiry without gas: each fails once, refunded once (PostgreSQL only)", async function () {
    requirePostgres(this, "two cores racing for one queue need a shared server");
    const { ids, balance } = await pay(20, 300);
    expect(await balance()).to.equal(94_000);
    const a = await otherCore();
    const b = await otherCore();
    for (const s of [a, b]) s.clock.advance(3_600_000);
    await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).core.settlement.worker.runOnce()));
    for (const s of [a, b]) await s.core.settlement.worker.runOnce();
    const rows = await stack.core.db("settlement_payments").whereIn("payment_id", ids).select("status", "failure_reason");
    expect(rows.map((r: { status: string; failure_reason: string }) => `${r.status}:${r.failure_reason}`)).to.deep.equal(ids.map(() => "failed:expired"));
    expect(await balance()).to.equal(100_000);
    const audits = count(stack.core.db("audit_records").whereIn("subject", ids).where({ action: "payments.settlement.failed" }).count({ n: "*" }));
    expect(await audits).to.equal(20);
    expect(await verify()).to.deep.equal([]);
  });
});
