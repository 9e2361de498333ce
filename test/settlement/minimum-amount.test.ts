import { expect } from "chai";
import { parseSettlementSettings } from "../../core/settlement/config.js";
import { createOwner, fundedChildBudget, ownerSession, stackRpc } from "../support/budgets.js";
import { requirePostgres, testDatabase } from "../support/db.js";
import { evmChainSettings, freshAddress } from "../support/evm-rail.js";
import { startMcpStack } from "../support/mcp.js";
import { freePort } from "../support/ports.js";
import { lockWaits } from "../support/lock-waits.js";
import { expectJsonRpcError } from "../support/refusals.js";
import type { TestStack } from "../support/stack.js";

const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";

/**
 * Every transfer on an evm chain costs the platform gas, so a chain takes payments from its minimum
 * (CHAIN_<NAME>_MIN_AMOUNT_CENTS, one dollar unless set); the sandbox rail has none.
 */
describe("the smallest payment an evm chain takes", function () {
  this.timeout(60_000);
  let stack: TestStack | undefined;
  afterEach(async () => {
    await stack?.close();
    stack = undefined;
  });

  // The node never answers: the minimum is checked when a payment is accepted, before anything reaches a chain.
  const start = async (minAmountCents: number | undefined, database?: Awaited<ReturnType<typeof testDatabase>>["db"]) =>
    startMcpStack({
      settlement: { evm: [evmChainSettings(`http://127.0.0.1:${await freePort()}`, USDC, { rpcTimeoutMs: 500, minAmountCents })] },
      settlementPollMs: 0,
      ...(database ? { database } : {}),
    });
  const payee = freshAddress();
  const pay = (s: TestStack, token: string, chain: string, amountCents: number, key: string) =>
    stackRpc(s)("/mcp/write", token, "tools/call", {
      name: "payments.initiate",
      arguments: { counterparty: { address: payee, chain, token: "USDC" }, amount_cents: amountCents, currency: "USD", idempotency_key: key },
    });
  const budget = { display_name: "Chain budget", chain_allowlist: ["base", "eth"] };

  it("below the chain's minimum: refused naming it, nothing taken, the key unused; at the minimum: accepted", async () => {
    stack = await start(100);
    const { agentToken, vaultId } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const below = await pay(stack, agentToken, "base", 99, "minimum-key-1");
    expect(below.json!.result.isError, below.text).to.equal(true);
    expect(below.json!.result._meta.error).to.deep.include({ code: -32602 });
    expect(below.json!.result._meta.error.message).to.equal("amount_cents must be at least 100 on chain base");
    expect(await stack.core.db("agent_payments").where({ vault_id: vaultId }).select("id")).to.deep.equal([]);
    const at = await pay(stack, agentToken, "base", 100, "minimum-key-1");
    expect(at.json!.result.structuredContent, at.text).to.deep.include({ kind: "accepted", status: "pending" });
    const balance = await stackRpc(stack)("/mcp/read", agentToken, "accounts.balance", {});
    expect(balance.json!.result.balance_cents).to.equal(10_000 - 100);
  });

  it("a chain on the sandbox rail takes a cent", async () => {
    stack = await start(100);
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const cent = await pay(stack, agentToken, "eth", 1, "minimum-key-2");
    expect(cent.json!.result.structuredContent, cent.text).to.deep.include({ kind: "accepted", status: "completed" });
  });

  it("a payment accepted before the operator raised the minimum: its retry answers its state", async () => {
    const { db } = await testDatabase();
    stack = await start(1, db);
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const first = await pay(stack, agentToken, "base", 50, "minimum-key-3");
    expect(first.json!.result.structuredContent, first.text).to.deep.include({ status: "pending" });
    await stack.close();
    stack = await start(100, db);
    const retry = await pay(stack, agentToken, "base", 50, "minimum-key-3");
    expect(retry.json!.result.structuredContent, retry.text).to.deep.include({
      payment_id: first.json!.result.structuredContent.payment_id,
      status: "pending",
    });
  });

  it("a payment made while its chain was on the sandbox rail: its retry answers its state; one still waiting for approval meets the evm rail's rules", async () => {
    const { db } = await testDatabase();
    // No evm setting: base settles on the sandbox rail, which takes any token.
    stack = await startMcpStack({ settlementPollMs: 0, database: db });
    const owner = await createOwner(stack);
    const { agentToken } = await fundedChildBudget(stack, { owner, fundCents: 10_000n, budget: { ...budget, step_up_amount_cents: 1_000 } });
    const args = (amount: number, key: string) => ({
      counterparty: { address: payee, chain: "base", token: "ETH" },
      amount_cents: amount,
      currency: "USD",
      idempotency_key: key,
    });
    const call = (s: TestStack, amount: number, key: string) => stackRpc(s)("/mcp/write", agentToken, "payments.initiate", args(amount, key));
    const paid = (await call(stack, 500, "sandbox-key-1")).json!.result;
    expect(paid).to.deep.include({ kind: "accepted", status: "completed" });
    const waiting = (await call(stack, 2_000, "sandbox-key-2")).json!.result;
    expect(waiting).to.deep.include({ kind: "pending_step_up" });
    await stack.clients.budgets.approvePayment({ sessionToken: await ownerSession(stack, owner.userId, { stepUp: true }), paymentId: waiting.payment_id });
    await stack.close();
    // The operator moves base to the evm rail, which pays USDC only.
    stack = await start(100, db);
    const retry = await call(stack, 500, "sandbox-key-1");
    expect(retry.json!.result, retry.text).to.deep.include({ kind: "accepted", payment_id: paid.payment_id, status: "completed" });
    // Approved but not yet made: accepting it now would pay USDC for a payment named in another token.
    const approved = await call(stack, 2_000, "sandbox-key-2");
    expect(expectJsonRpcError(approved, -32602, "token_unsupported").message).to.equal("counterparty.token must be USDC on chain base");
    expect((await stackRpc(stack)("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents).to.equal(10_000 - 500);
  });

  it("approved while its retry waited for the vault, after its chain moved to the evm rail: the rail's rules still refuse it (PostgreSQL only)", async function () {
    requirePostgres(this, "a retry waiting on the vault's lock needs a second connection");
    const { db } = await testDatabase();
    stack = await startMcpStack({ settlementPollMs: 0, database: db });
    const owner = await createOwner(stack);
    const { agentToken, vaultId } = await fundedChildBudget(stack, { owner, fundCents: 10_000n, budget: { ...budget, step_up_amount_cents: 1_000 } });
    const args = { counterparty: { address: payee, chain: "base", token: "ETH" }, amount_cents: 2_000, currency: "USD", idempotency_key: "sandbox-key-3" };
    const waiting = (await stackRpc(stack)("/mcp/write", agentToken, "payments.initiate", args)).json!.result;
    expect(waiting).to.deep.include({ kind: "pending_step_up" });
    await stack.close();
    stack = await start(100, db);
    const session = await ownerSession(stack, owner.userId, { stepUp: true });
    // The retry reads the payment still waiting, then waits for the vault the owner's approval does not need.
    const vault = await db.transaction();
    await vault.raw(`SELECT 1 FROM vaults WHERE id = ? FOR UPDATE`, [vaultId]);
    const retry = stackRpc(stack)("/mcp/write", agentToken, "payments.initiate", args);
    await Promise.race([lockWaits(db, "vaults"), retry]);
    await stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: waiting.payment_id });
    await vault.commit();
    expect(expectJsonRpcError(await retry, -32602, "token_unsupported").message).to.equal("counterparty.token must be USDC on chain base");
    expect(await stack.core.db("settlement_payments").where({ payment_id: waiting.payment_id })).to.deep.equal([]);
    expect((await stackRpc(stack)("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents).to.equal(10_000);
  });

  it("payments.simulate refuses what initiate refuses on the chain, with the same answer; what it accepts, initiate takes", async () => {
    stack = await start(100);
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const wallet = stack.core.settlement.evm("base")!.wallet;
    const call = (method: string, over: { to?: string; token?: string; amount?: number; currency?: string }, key: string) =>
      stackRpc(stack!)("/mcp/write", agentToken, method, {
        counterparty: { address: over.to ?? payee, chain: "base", token: over.token ?? "USDC" },
        amount_cents: over.amount ?? 100,
        currency: over.currency ?? "USD",
        idempotency_key: key,
      });
    const cases: [string, Parameters<typeof call>[1], string][] = [
      ["below the minimum", { amount: 99 }, "amount_cents must be at least 100 on chain base"],
      ["another token", { token: "USDT" }, "counterparty.token must be USDC on chain base"],
      ["another currency", { currency: "EUR" }, "currency must be USD on chain base (it settles in USDC)"],
      ["the hot wallet", { to: wallet }, "counterparty.address is the hot wallet chain base pays from"],
      ["the USDC contract", { to: USDC.toLowerCase() }, "counterparty.address is the USDC contract of chain base, which never sends it on"],
    ];
    for (const [what, over, message] of cases) {
      const simulated = await call("payments.simulate", over, `sim-${what.replaceAll(" ", "-")}`);
      const initiated = await call("payments.initiate", over, `ini-${what.replaceAll(" ", "-")}`);
      expect(simulated.json!.error, `${what}: ${simulated.text}`).to.deep.include({ message });
      const answer = (e: { code: number; message: string; data: { reason_id: string } }) => [e.code, e.message, e.data.reason_id];
      expect(answer(simulated.json!.error), what).to.deep.equal(answer(initiated.json!.error));
    }
    expect((await call("payments.simulate", {}, "sim-at-minimum")).json!.result, "at the minimum").to.deep.include({ outcome: "accepted" });
    expect((await call("payments.initiate", {}, "ini-at-minimum")).json!.result).to.deep.include({ kind: "accepted", status: "pending" });
  });

  it("a hostile agent racing each key below and at the minimum: only the minimum is ever recorded, once per key (PostgreSQL only)", async function () {
    requirePostgres(this, "racing payments need concurrent transactions");
    stack = await start(100);
    const { agentToken, vaultId } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const keys = Array.from({ length: 20 }, (_, i) => `race-minimum-${i}`);
    const answers = await Promise.all(keys.flatMap((key) => [pay(stack!, agentToken, "base", 99, key), pay(stack!, agentToken, "base", 100, key)]));
    // Before the payment at the minimum committed, the key was unused; after, it names other parameters.
    const refusals = ["amount_cents must be at least 100 on chain base", "idempotency_key was used with other parameters"];
    for (const [i, r] of answers.entries()) {
      const result = r.json!.result;
      if (i % 2 === 1) expect(result.structuredContent, r.text).to.deep.include({ kind: "accepted", status: "pending" });
      else expect(refusals, r.text).to.include(result._meta.error.message);
    }
    const rows = await stack.core.db("agent_payments").where({ vault_id: vaultId }).select("amount_cents");
    expect(rows.map((p) => Number(p.amount_cents))).to.deep.equal(keys.map(() => 100));
    const balance = await stackRpc(stack)("/mcp/read", agentToken, "accounts.balance", {});
    expect(balance.json!.result.balance_cents).to.equal(10_000 - 100 * keys.length);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("the setting: one dollar unless set; a value that is not a whole number of cents from 1 refuses the start, naming it", () => {
    const env = { CHAIN_BASE_RAIL: "evm", CHAIN_BASE_RPC_URL: "http://127.0.0.1:8545", CHAIN_BASE_USDC: USDC };
    expect(parseSettlementSettings(env).evm[0]!.minAmountCents).to.equal(100);
    expect(parseSettlementSettings({ ...env, CHAIN_BASE_MIN_AMOUNT_CENTS: "1" }).evm[0]!.minAmountCents).to.equal(1);
    for (const bad of ["0", "1.5", "-1", "ten"])
      expect(() => parseSettlementSettings({ ...env, CHAIN_BASE_MIN_AMOUNT_CENTS: bad }), bad).to.throw(
        "CHAIN_BASE_MIN_AMOUNT_CENTS must be a whole number from 1 to 9007199254740991",
      );
  });
});
