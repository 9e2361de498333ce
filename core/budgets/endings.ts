import { randomUUID } from "node:crypto";
import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { callFacts, kRequestId } from "../context.js";
import type { RevokedGrants } from "../grants/stores/budget-grants.js";
import { endBudgetTree, type EndingDeps } from "./closing.js";

/** What ending marked budgets needs; `logger` hears of an ending left for the reaper. */
export interface EndingsDeps extends EndingDeps {
  logger?: { error(obj: object, msg: string): void };
}

/**
 * In a transaction revoking grants: their open payments are declined and their drafts marked to end
 * (never declined here: the revoke holds grant locks, and budget rows lock before grants).
 */
export async function cancelInFlight(deps: EndingsDeps, trx: Knex.Transaction, revoked: RevokedGrants, at: Date): Promise<string[]> {
  await deps.payments.declineRevokedPayments(trx, revoked, at);
  return deps.budgets.markRevokedDrafts(trx, revoked, at);
}

/**
 * Ends one marked budget in a transaction of its own, its row locked first: a draft whose agent's
 * grant was revoked is declined (its tree ended, its money back to its parent); a declined draft whose
 * tree an older release left open has it ended now. Anything else only loses its mark.
 */
async function endMarked(deps: EndingsDeps, budgetId: string, actor: string, ctx: Pick<HandlerContext, "values">): Promise<void> {
  await deps.db.transaction(async (trx) => {
    const b = await deps.budgets.lockBudget(trx, budgetId);
    if (!b || !(await deps.budgets.takeEnding(trx, budgetId))) return;
    const now = deps.clock();
    if (b.status === "declined") {
      await endBudgetTree(deps, trx, ctx, b, { status: "declined", actor, sweep: true, now });
      return;
    }
    if (b.status !== "draft") return;
    // Revocation is final, so a draft marked for it still has a revoked creator.
    if ((await deps.grants.findGrant(trx, b.grantId, true))?.state !== "revoked") return;
    await endBudgetTree(deps, trx, ctx, b, { status: "declined", actor, sweep: true, now });
    await deps.audit.append(trx, {
      ...callFacts(ctx),
      actor,
      action: "agent.budget.decline",
      outcome: "success",
      reason: "grant_revoked",
      subject: b.agentPrincipalId,
      at: now,
    });
  });
}

/** Ends each marked budget; one that fails keeps its mark for the next reaper pass. */
export async function endMarkedBudgets(deps: EndingsDeps, budgetIds: string[], actor: string, ctx: Pick<HandlerContext, "values">): Promise<void> {
  for (const id of budgetIds) {
    try {
      await endMarked(deps, id, actor, ctx);
    } catch (err) {
      deps.logger?.error({ err, budgetId: id }, "could not end a budget marked for ending; the reaper retries");
    }
  }
}

/** The reaper's share: the oldest marked budgets, ended with the reaper as actor. */
export async function reapEndings(deps: EndingsDeps): Promise<void> {
  const ids = await deps.budgets.listEndings(deps.db, 100);
  if (ids.length > 0) await endMarkedBudgets(deps, ids, "reaper", { values: createContextValues().set(kRequestId, randomUUID()) });
}
