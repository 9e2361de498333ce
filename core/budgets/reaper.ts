import { randomUUID } from "node:crypto";
import { compensateStep, STEPS, type SagaDeps } from "./saga.js";
import { reapEndings, type EndingsDeps } from "./endings.js";

/** One reaper pass: finishes partial cleanups and abandoned sagas (returns how many), then ends marked budgets (endings.ts). */
export async function reap(deps: SagaDeps & EndingsDeps): Promise<number> {
  const { db, saga, staleMs } = deps;
  const now = deps.clock();
  let cleaned = 0;
  for (const candidate of await saga.listReapable(db, new Date(now.getTime() - staleMs))) {
    try {
      await db.transaction(async (trx) => {
        // Re-read under lock: a retry of the key may have restarted it meanwhile.
        const row = await deps.budgets.lockBudget(trx, candidate.id);
        const stale = row && row.status === "provisioning" && row.updatedAt.getTime() < now.getTime() - staleMs;
        if (!row || (row.status !== "cleanup_pending" && !stale)) return;
        for (const name of [...STEPS].reverse()) await compensateStep(deps, candidate, name, trx);
        const steps = STEPS.map((name) => ({ name, state: "compensated" as const }));
        // Bumping the attempt fences the abandoned saga if it ever wakes up.
        await deps.budgets.updateBudget(trx, candidate.id, { status: "failed", steps, remaining: [], attempt: row.attempt + 1 }, now);
        await saga.releaseClaim(trx, candidate.parentVaultId, candidate.id);
        await deps.audit.append(trx, {
          requestId: randomUUID(),
          actor: "reaper",
          action: "agent.budget.cleanup",
          outcome: "success",
          subject: candidate.agentPrincipalId,
          at: now,
        });
        cleaned++;
      });
    } catch {
      // Left for the next pass; the budget still reports its remaining resources.
    }
  }
  await reapEndings(deps);
  return cleaned;
}
