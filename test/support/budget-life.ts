import { expect } from "chai";
import type { TestStack } from "./stack.js";
import { budgetParams, createOwner, grantFor, type TestOwner } from "./budgets.js";

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
