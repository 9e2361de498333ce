import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { PaymentStatus } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import type { TestStack } from "./stack.js";
import { budgetParams, createOwner, grantFor, ownerSession, payment, type TestOwner } from "./budgets.js";

/**
 * A user's root vault holding `parentCents` (operator funding), an agent grant on it with
 * every agent scope (step-up, so its budgets are active at once) and one budget created
 * under it through CreateBudget. `budget` is the child agent's view (its vault and principal).
 */
export async function budgetUnderRoot(stack: TestStack, opts: { parentCents?: bigint; stepUp?: boolean; budget?: Record<string, unknown> } = {}) {
  const owner = await createOwner(stack);
  if ((opts.parentCents ?? 10_000n) > 0n) await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: opts.parentCents ?? 10_000n });
  const parentToken = await grantFor(stack, owner, { stepUp: opts.stepUp ?? true });
  const params = budgetParams({ stepUpAmountCents: undefined, ...opts.budget });
  const { budget } = await stack.clients.budgets.createBudget({ accessToken: parentToken, ...params });
  const child: TestOwner = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
  return { owner, parentToken, child, params, budget: budget! };
}

/** A vault's balance as stored. */
export async function balanceOf(stack: TestStack, vaultId: string): Promise<number> {
  const row = await stack.core.db("vaults").where({ id: vaultId }).first("balance_cents");
  return Number(row.balance_cents);
}

/** The operator's proof of the books (AuditService.VerifyLedger): every check passes. */
export async function expectLedgerBalanced(stack: TestStack): Promise<void> {
  const report = await stack.admin.audit.verifyLedger({});
  expect(
    report.discrepancies.map((d) => `${d.check}: ${d.message}`),
    "ledger verify",
  ).to.deep.equal([]);
  expect(report.ok).to.equal(true);
}

/** The legs of one ledger transaction, as {account owner: amount}. */
export async function legsOf(stack: TestStack, transactionId: string): Promise<{ kind: string; legs: Record<string, number> }> {
  const tx = await stack.core.db("ledger_transactions").where({ id: transactionId }).first("kind");
  const rows = await stack.core
    .db("ledger_postings as p")
    .join("ledger_accounts as a", "a.id", "p.account_id")
    .where({ "p.transaction_id": transactionId })
    .select("a.owner", "p.amount_cents");
  return { kind: tx?.kind, legs: Object.fromEntries(rows.map((r: { owner: string; amount_cents: string }) => [r.owner, Number(r.amount_cents)])) };
}

/** A new owner's budget holding 100,000 (step-up above 5,000): the owner, and the budget as its own agent. */
export async function fundedBudget(stack: TestStack): Promise<{ owner: TestOwner; child: TestOwner }> {
  const owner = await createOwner(stack);
  const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...budgetParams() });
  await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: 100_000n });
  return { owner, child: { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId } };
}

/** A payment (7,000 unless given) by `accessToken`, a grant without step-up on a fundedBudget: it waits for the owner; its id. */
export async function stepUpPayment(stack: TestStack, accessToken: string, request = payment({ amountCents: 7_000n })): Promise<string> {
  const { payment: p } = await stack.clients.budgets.initiatePayment({ accessToken, payment: request });
  expect(p!.status).to.equal(PaymentStatus.PENDING_STEP_UP);
  return p!.paymentId;
}

/** A fundedBudget with a stepUpPayment of `p` waiting for its owner. */
export async function waitingPayment(stack: TestStack, p = payment({ amountCents: 7_000n })) {
  const { owner, child } = await fundedBudget(stack);
  return { owner, child, p, paymentId: await stepUpPayment(stack, await grantFor(stack, child), p) };
}

/** A funded draft D whose agent (stepped up) made an active sub-budget S, funded from D, with its own active S2 below. */
export async function draftWithTree(stack: TestStack) {
  const key = () => `k-${randomUUID()}`;
  const asChild = (owner: TestOwner, b: { vaultId: string; agentPrincipalId: string }): TestOwner => ({ userId: owner.userId, ...b });
  const owner = await createOwner(stack);
  await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: 100_000n });
  const session = await ownerSession(stack, owner.userId, { stepUp: true });
  const d = asChild(owner, (await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() })).budget!);
  await stack.clients.budgets.fundBudget({ sessionToken: session, vaultId: d.vaultId, amountCents: 30_000n, idempotencyKey: key() });
  const dToken = await grantFor(stack, d, { stepUp: true });
  const s = asChild(owner, (await stack.clients.budgets.createBudget({ accessToken: dToken, ...budgetParams() })).budget!);
  await stack.clients.budgets.fundBudget({ accessToken: dToken, vaultId: s.vaultId, amountCents: 20_000n, idempotencyKey: key() });
  const sToken = await grantFor(stack, s, { stepUp: true });
  const s2 = asChild(owner, (await stack.clients.budgets.createBudget({ accessToken: sToken, ...budgetParams() })).budget!);
  await stack.clients.budgets.fundBudget({ accessToken: sToken, vaultId: s2.vaultId, amountCents: 5_000n, idempotencyKey: key() });
  return { owner, session, d, dToken, s, sToken, s2, s2Token: await grantFor(stack, s2) };
}
