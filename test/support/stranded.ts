import { randomUUID } from "node:crypto";
import { budgetUnderRoot } from "./budget-life.js";
import { budgetParams } from "./budgets.js";
import type { TestStack } from "./stack.js";

/**
 * A new owner whose agent closes `n` budgets of 100 cents each with keep_funds, all at the
 * stack clock's instant, then moves the clock on a second. Their vaults, as they sort (by id).
 */
export async function strandTogether(stack: TestStack, n: number): Promise<string[]> {
  const t = await budgetUnderRoot(stack, { parentCents: 10_000n });
  const { budgets } = stack.clients;
  const vaults: string[] = [];
  for (let i = 0; i < n; i++) {
    const { budget } = await budgets.createBudget({ accessToken: t.parentToken, ...budgetParams({ stepUpAmountCents: undefined }) });
    await budgets.fundBudget({ accessToken: t.parentToken, vaultId: budget!.vaultId, amountCents: 100n, idempotencyKey: `k-${randomUUID()}` });
    vaults.push(budget!.vaultId);
  }
  for (const vaultId of vaults) await budgets.closeBudget({ accessToken: t.parentToken, vaultId, keepFunds: true });
  stack.clock.advance(1000);
  return vaults.sort();
}

/** Sets the stack's clock years ahead, past every other file's closes: this file's stranded vaults sort last. */
export function closeAfterEveryoneElse(stack: TestStack): void {
  stack.clock.set(new Date(Date.now() + 5 * 365 * 86_400_000));
}

/**
 * The vaults of closed budgets `ListStrandedFunds` names (what `ledger verify` lists as stranded_funds),
 * every page: the shared test database may hold more than one page of other files' vaults.
 */
export async function strandedVaults(stack: TestStack): Promise<string[]> {
  const vaults: string[] = [];
  let cursor = "";
  do {
    const page = await stack.admin.budgets.listStrandedFunds({ cursor });
    vaults.push(...page.vaults.map((v) => v.vaultId));
    cursor = page.nextCursor;
  } while (cursor);
  return vaults;
}
