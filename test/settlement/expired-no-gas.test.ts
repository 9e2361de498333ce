import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Anvil } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { ownDatabase, requirePostgres } from "../support/db.js";
import { evmRailStackOptions, freshAddress, startEvmRailStack, type EvmChain } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";
import { coreMetricsListener } from "../support/metrics.js";

/**
 * A payment signed and sent, then the hot wallet's gas gone and its expiry past: it can be neither
 * failed (its nonce would block every later one) nor cancelled, so it waits, visibly, for gas.
 */
describe("a signed payment whose expiry passes while the hot wallet has no gas (anvil)", function () {
  this.timeout(120_000);
  let chain: EvmChain & { stack: McpStack; wallet: string };
  let stack: McpStack;
  let anvil: Anvil;
  let metrics: Awaited<ReturnType<typeof coreMetricsListener>>;
  const others: McpStack[] = [];
  // Its own books: the overdue gauge it checks would count other files' stuck payments in the shared database.
  let books: Awaited<ReturnType<typeof ownDatabase>>;

  before(async () => {
    books = await ownDatabase();
    chain = await startEvmRailStack(startMcpStack, 10_000_000, { database: books.db });
    ({ stack, anvil } = chain);
    metrics = await coreMetricsListener();
  });
  beforeEach(async () => {
    await anvil.fundGas(chain.wallet);
  });
  afterEach(async () => {
    await anvil.setAutomine(true);
    await Promise.all(others.splice(0).map((s) => s.close()));
  });
  after(async () => {
    await metrics?.close();
    await stack?.close();
    await anvil?.stop();
    await books?.drop();
  });

  /** Another core on the same database and hot wallet whose clock is `pastExpiryMs` beyond the payments' expiry. */
  async function laterCore(pastExpiryMs: number): Promise<McpStack> {
    const s = await startMcpStack({ ...evmRailStackOptions(chain.settings), database: books.db });
    others.push(s);
    s.clock.advance(3_600_000 + pastExpiryMs);
    return s;
  }

  /** `count` payments signed and sent; then the wallet's gas is gone and the node drops them, as a node drops sends their sender cannot pay. */
  async function signedThenNoGas(count: number, amountCents = 700) {
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 100_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
    const rpc = stackRpc(stack);
    const initiate = (to: string, key: string) =>
      rpc("/mcp/write", agentToken, "payments.initiate", {
        counterparty: { address: to, chain: "base", token: "USDC" },
        amount_cents: amountCents,
        currency: "USD",
        idempotency_key: key,
      });
    const payees = Array.from({ length: count }, () => ({ to: freshAddress(), key: `p-${randomBytes(6).toString("hex")}` }));
    const ids = await Promise.all(payees.map(async (p) => (await initiate(p.to, p.key)).json!.result.payment_id as string));
    await anvil.setAutomine(false);
    await stack.core.settlement.worker.runOnce();
    const signed = await stack.core.db("settlement_payments").whereIn("payment_id", ids).select("status", "tx_hash");
    expect(signed.map((r: { status: string }) => r.status)).to.deep.equal(ids.map(() => "submitted"));
    await anvil.fundGas(chain.wallet, 0n);
    for (const r of signed) await anvil.rpc("anvil_dropTransaction", [r.tx_hash]);
    await anvil.setAutomine(true);
    const balance = async () => (await rpc("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents as number;
    return { ids, payees, balance, initiate };
  }

  const row = async (id: string) => stack.core.db("settlement_payments").where({ payment_id: id }).first();
  const sentByWallet = () => anvil.client.getTransactionCount({ address: chain.wallet as `0x${string}` });
  const verify = async () => (await stack.admin.audit.verifyLedger({})).discrepancies;
  const count = async (q: Promise<{ n: string | number }[]>) => Number((await q)[0]!.n);
  const audits = (ids: string[], status: string) =>
    count(
      stack.core
        .db("audit_records")
        .whereIn("subject", ids)
        .where({ action: `payments.settlement.${status}` })
        .count({ n: "*" }),
    );
  const overdue = async () => (await metrics.scrape()).value("vaultgate_settlement_overdue_seconds", { chain: "base" });

  it("stays submitted and charged, named with its chain and time past expiry in a log line and on /metrics; with gas back it is cancelled and refunded once", async () => {
    const { ids, payees, balance, initiate } = await signedThenNoGas(1);
    const id = ids[0]!;
    const nonces = await sentByWallet();
    const later = await laterCore(600_000);
    for (let i = 0; i < 3; i++) await later.core.settlement.worker.runOnce();
    expect(await row(id)).to.deep.include({ status: "submitted", failure_reason: null });
    expect(await balance()).to.equal(99_300);
    const line = later.logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).findLast((l) => String(l.msg).includes("past its expiry"));
    expect(line, "a log line says the signed payment is stuck past its expiry").to.include({ chain: "base", wallet: chain.wallet, paymentId: id });
    expect(line!.overdueSeconds).to.be.within(600, 700);
    expect(await overdue()).to.be.within(600, 700);

    // The agent retries meanwhile, many times at once: the same payment each time, charged once.
    const retries = await Promise.all(Array.from({ length: 8 }, () => initiate(payees[0]!.to, payees[0]!.key)));
    expect(retries.map((r) => r.json!.result.payment_id)).to.deep.equal(retries.map(() => id));
    expect(await balance()).to.equal(99_300);

    await anvil.fundGas(chain.wallet);
    for (let i = 0; i < 6; i++) {
      await later.core.settlement.worker.runOnce();
      await anvil.mine(1);
    }
    expect(await row(id)).to.deep.include({ status: "failed", failure_reason: "expired" });
    expect(await sentByWallet(), "its nonce is used, by the cancellation").to.equal(nonces + 1);
    expect(await anvil.usdcBalance(chain.usdc, payees[0]!.to)).to.equal(0n);
    expect(await balance()).to.equal(100_000);
    expect(await audits(ids, "failed")).to.equal(1);
    expect(await overdue()).to.equal(0);
    expect(await verify()).to.deep.equal([]);
  });

  it("when its own transfer is mined once the gas is back, it completes and is paid once, never refunded", async () => {
    const { ids, payees, balance } = await signedThenNoGas(1);
    const id = ids[0]!;
    const later = await laterCore(60_000);
    for (let i = 0; i < 2; i++) await later.core.settlement.worker.runOnce();
    const transfer = await stack.core.db("settlement_transactions").where({ payment_id: id, kind: "transfer" }).first();
    await anvil.fundGas(chain.wallet);
    // Another node's pool still had the transfer and gets it mined first.
    await anvil.client.sendRawTransaction({ serializedTransaction: transfer.raw_tx });
    for (let i = 0; i < 6; i++) {
      await later.core.settlement.worker.runOnce();
      await anvil.mine(1);
    }
    expect(await row(id)).to.deep.include({ status: "completed", tx_hash: transfer.tx_hash });
    expect(await anvil.usdcBalance(chain.usdc, payees[0]!.to)).to.equal(7_000_000n);
    expect(await balance()).to.equal(99_300);
    expect(await audits(ids, "failed")).to.equal(0);
    expect(await audits(ids, "completed")).to.equal(1);
    expect(await verify()).to.deep.equal([]);
  });

  it("many stuck payments and two cores racing once the gas is back: each is cancelled with its own nonce and refunded exactly once (PostgreSQL only)", async function () {
    requirePostgres(this, "two cores racing for one queue need a shared server");
    const { ids, balance } = await signedThenNoGas(8, 300);
    const nonces = await sentByWallet();
    const [a, b] = [await laterCore(120_000), await laterCore(120_000)];
    await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? a : b).core.settlement.worker.runOnce()));
    expect(await balance()).to.equal(97_600);
    await anvil.fundGas(chain.wallet);
    for (let i = 0; i < 8; i++) {
      await Promise.all([a, b].map((s) => s.core.settlement.worker.runOnce()));
      await anvil.mine(1);
    }
    const rows = await stack.core.db("settlement_payments").whereIn("payment_id", ids).select("status", "failure_reason");
    expect(rows.map((r: { status: string; failure_reason: string }) => `${r.status}:${r.failure_reason}`)).to.deep.equal(ids.map(() => "failed:expired"));
    expect(await sentByWallet()).to.equal(nonces + 8);
    expect(await balance()).to.equal(100_000);
    expect(await audits(ids, "failed")).to.equal(8);
    expect(await verify()).to.deep.equal([]);
  });
});
