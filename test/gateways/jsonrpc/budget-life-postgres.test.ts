import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startMcpStack, postRpc, type JsonRpcReply, type McpStack } from "../../support/mcp.js";
import { requirePostgres } from "../../support/db.js";
import { budgetParams, grantFor, type TestOwner } from "../../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../../support/budget-life.js";

/**
 * Funding and closing budgets under real concurrency, over HTTP. PGlite runs one statement
 * at a time and would hide every race here, so these run in CI's PostgreSQL pass only.
 */
describe("agent.budget.fund / agent.budget.revoke under concurrency (Postgres)", function () {
  this.timeout(120_000);
  let stack: McpStack;
  before(async function () {
    requirePostgres(this, "concurrent funding and closing need several connections");
    stack = await startMcpStack({ provisioningLimitPerMinute: 1_000 });
  });
  after(() => stack?.close());

  /** The fields of agent.budget.fund's and agent.budget.revoke's results these tests read. */
  type Funded = { transfer_id: string; replayed: boolean; balance_cents: number };
  type Closed = { already_closed: boolean; swept_cents: number };

  const key = () => `conc-${randomUUID()}`;
  const rpc = async <Result = Record<string, unknown>>(path: string, token: string, method: string, params: unknown) => {
    const res = await postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
    return res.json as JsonRpcReply<Result>;
  };
  const fund = (token: string, vaultId: string, amount: number, idempotencyKey = key()) =>
    rpc<Funded>("/mcp/treasury", token, "agent.budget.fund", { vault_id: vaultId, amount_cents: amount, idempotency_key: idempotencyKey });
  const pay = (token: string, amount: number) =>
    rpc("/mcp/write", token, "payments.initiate", {
      counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
      amount_cents: amount,
      currency: "USD",
      idempotency_key: key(),
    });
  /** Every refusal is one a caller can act on: no deadlock, no server error. */
  const expectOnly = (outcomes: JsonRpcReply<unknown>[], allowed: string[]) => {
    const reasons = outcomes.filter((o) => o.error).map((o) => String(o.error!.data?.reason_id));
    expect(
      reasons.filter((r) => !allowed.includes(r)),
      JSON.stringify(outcomes.filter((o) => o.error).slice(0, 3)),
    ).to.deep.equal([]);
  };
  const completedFrom = async (vaultId: string) =>
    Number((await stack.core.db("agent_payments").where({ vault_id: vaultId, status: "completed" }).sum({ s: "amount_cents" }))[0]!.s ?? 0);

  it("60 concurrent fundings of 300 (distinct keys) into three budgets of one parent of 5,000: never overdrawn, exactly 16 move", async () => {
    const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 5_000n });
    const budgets = [child.vaultId];
    // One provisioning at a time per parent vault.
    for (let i = 0; i < 2; i++) budgets.push((await stack.clients.budgets.createBudget({ accessToken: parentToken, ...budgetParams() })).budget!.vaultId);
    const tokens = await Promise.all([0, 1, 2, 3].map(() => grantFor(stack, owner)));
    const outcomes = await Promise.all(Array.from({ length: 60 }, (_, i) => fund(tokens[i % tokens.length]!, budgets[i % budgets.length]!, 300)));
    expectOnly(outcomes, ["insufficient_funds"]);
    const moved = outcomes.filter((o) => o.result);
    expect(moved).to.have.length(16);
    expect(new Set(moved.map((o) => o.result!.transfer_id)).size).to.equal(16);
    const inBudgets = (await Promise.all(budgets.map((v) => balanceOf(stack, v)))).reduce((a, b) => a + b, 0);
    expect([await balanceOf(stack, owner.vaultId), inBudgets]).to.deep.equal([200, 4_800]);
    await expectLedgerBalanced(stack);
  });

  it("30 concurrent calls with one key move the money once: one answer moved it, every other one is its replay", async () => {
    const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 5_000n });
    const k = key();
    const tokens = [parentToken, await grantFor(stack, owner), await grantFor(stack, owner)];
    const outcomes = await Promise.all(Array.from({ length: 30 }, (_, i) => fund(tokens[i % 3]!, child.vaultId, 1_250, k)));
    expectOnly(outcomes, []);
    expect(outcomes.filter((o) => o.result!.replayed === false)).to.have.length(1);
    expect(new Set(outcomes.map((o) => o.result!.transfer_id)).size).to.equal(1);
    expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([3_750, 1_250]);
    expect(await stack.core.db("ledger_transactions").where({ id: outcomes[0]!.result!.transfer_id })).to.have.length(1);
    await expectLedgerBalanced(stack);
  });

  it("a close racing payments, fundings and other closes: the books balance, no money is lost, nothing is paid after the close", async () => {
    const { owner, parentToken, child } = await budgetUnderRoot(stack, {
      parentCents: 20_000n,
      budget: { amountCapCentsPerTx: 1_000n, amountCapCentsPerDay: undefined, amountCapCentsLifetime: undefined },
    });
    expect((await fund(parentToken, child.vaultId, 5_000)).result!.balance_cents).to.equal(5_000);
    const payers = await Promise.all([0, 1, 2, 3, 4].map(() => grantFor(stack, child)));
    const funders = await Promise.all([0, 1].map(() => grantFor(stack, owner)));
    const payments = Array.from({ length: 60 }, (_, i) => pay(payers[i % payers.length]!, 100));
    const fundings = Array.from({ length: 20 }, (_, i) => fund(funders[i % 2]!, child.vaultId, 100));
    // Let some of them land first, then close (three times at once) while the rest are in flight.
    const deadline = Date.now() + 30_000;
    while ((await completedFrom(child.vaultId)) < 500 && Date.now() < deadline) await new Promise((r) => setImmediate(r));
    const closes = [0, 1, 2].map(() => rpc<Closed>("/mcp/treasury", parentToken, "agent.budget.revoke", { vault_id: child.vaultId }));
    const [paid, funded, closed] = await Promise.all([Promise.all(payments), Promise.all(fundings), Promise.all(closes)]);

    // A payment fails for its revoked grant, the frozen policy, or (before the fundings land) the balance.
    expectOnly(paid, ["invalid_token", "policy_denied", "insufficient_funds"]);
    expectOnly(funded, ["access_denied"]);
    expectOnly(closed, []);
    expect(closed.filter((c) => c.result!.already_closed === false)).to.have.length(1);
    const first = closed.find((c) => c.result!.already_closed === false)!.result!;
    // What was completed before the close is all that was ever paid; the rest went back.
    const spent = await completedFrom(child.vaultId);
    const fundedCents = 5_000 + funded.filter((f) => f.result).length * 100;
    expect(spent + first.swept_cents).to.equal(fundedCents);
    expect(await balanceOf(stack, child.vaultId)).to.equal(0);
    expect(await balanceOf(stack, owner.vaultId)).to.equal(20_000 - spent);
    // Every completion was written before the close's own audit row (rows take their seq
    // when written, and the close waits for every payment holding its grant or the vault).
    const closeSeq = Number(
      (await stack.core.db("audit_records").where({ action: "agent.budget.close", subject: child.vaultId, outcome: "success" }).first()).seq,
    );
    const paidIds = (await stack.core.db("agent_payments").where({ vault_id: child.vaultId, status: "completed" }).select("id")).map(
      (r: { id: string }) => r.id,
    );
    const lastPaid = await stack.core
      .db("audit_records")
      .where({ action: "payments.initiate", outcome: "success" })
      .whereIn("subject", paidIds)
      .max({ seq: "seq" });
    expect(Number(lastPaid[0]!.seq)).to.be.below(closeSeq);
    expect(paid.filter((p) => p.result).length * 100).to.equal(spent);
    await expectLedgerBalanced(stack);
  });

  it("nested budgets funded, spent and closed at once at every level: no deadlock, every cent accounted for", async () => {
    // root A -> budget B -> budget C, each budget with a spending agent.
    const {
      owner,
      parentToken: tokenA,
      child: b,
    } = await budgetUnderRoot(stack, {
      parentCents: 50_000n,
      budget: { amountCapCentsPerTx: 1_000n, amountCapCentsPerDay: undefined, amountCapCentsLifetime: undefined },
    });
    expect((await fund(tokenA, b.vaultId, 20_000)).result).to.not.equal(undefined);
    const tokenB = await grantFor(stack, b, { stepUp: true });
    const { budget } = await stack.clients.budgets.createBudget({
      accessToken: tokenB,
      ...budgetParams({ amountCapCentsPerTx: 1_000n, amountCapCentsPerDay: undefined, amountCapCentsLifetime: undefined, stepUpAmountCents: undefined }),
    });
    const c: TestOwner = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    expect((await fund(tokenB, c.vaultId, 5_000)).result).to.not.equal(undefined);
    const payB = await Promise.all([0, 1, 2].map(() => grantFor(stack, b)));
    const payC = await Promise.all([0, 1, 2].map(() => grantFor(stack, c)));
    const fundB = await grantFor(stack, owner);
    const calls: Promise<JsonRpcReply<unknown>>[] = [];
    for (let i = 0; i < 30; i++) {
      calls.push(pay(payB[i % 3]!, 100), pay(payC[i % 3]!, 100), fund(fundB, b.vaultId, 100), fund(tokenB, c.vaultId, 100));
      if (i === 10) calls.push(rpc("/mcp/treasury", tokenB, "agent.budget.revoke", { vault_id: c.vaultId }));
      if (i === 20) calls.push(rpc("/mcp/treasury", tokenA, "agent.budget.revoke", { vault_id: b.vaultId }));
    }
    const outcomes = await Promise.all(calls);
    expectOnly(outcomes, ["invalid_token", "policy_denied", "access_denied", "insufficient_funds"]);
    const spent = (await completedFrom(b.vaultId)) + (await completedFrom(c.vaultId));
    const held = (await balanceOf(stack, owner.vaultId)) + (await balanceOf(stack, b.vaultId)) + (await balanceOf(stack, c.vaultId));
    expect(held + spent).to.equal(50_000);
    // Closing B closed C with it, whichever close ran first.
    for (const v of [b.vaultId, c.vaultId]) expect((await stack.core.db("budgets").where({ vault_id: v }).first()).status).to.equal("closed");
    expect([await balanceOf(stack, b.vaultId), await balanceOf(stack, c.vaultId)]).to.deep.equal([0, 0]);
    await expectLedgerBalanced(stack);
  });
});
