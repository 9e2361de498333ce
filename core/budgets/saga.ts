/*
 * CreateBudget's saga: three resource steps in their own transactions, a final install, and
 * compensation newest first. Every budgets transaction locks budget rows (ancestors first),
 * then grants, then vaults by id, so they cannot deadlock.
 */
import { randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { BudgetGrantsStore } from "../grants/stores/budget-grants.js";
import { auditOutside, GrantGone, stillUsable, usable } from "./caller.js";
import { AWAITING_LIMIT, AWAITING_MESSAGE, hasFreshStepUp, MAX_AWAITING_OWNER } from "./policy.js";
import type { BudgetRecord, StepName, StepState } from "./records.js";
import type { BudgetsRowStore } from "./stores/budgets.js";
import type { PaymentsStore } from "./stores/payments.js";
import type { SagaStore } from "./stores/saga.js";
import type { VaultsStore } from "./stores/vaults.js";

/** Test-only seams for failures that cannot be caused for real. */
export interface BudgetsFaults {
  /** An error fails that step (phase "run") or its compensation inside its transaction. */
  step?: (name: StepName, phase: "run" | "compensate") => Error | undefined;
  /** Awaited before a step starts, outside any transaction: holds a saga mid-flight. */
  beforeStep?: (name: StepName) => Promise<void>;
  /** An error replaces the success audit row of the final transaction (it rolls back). */
  finalAudit?: () => Error | undefined;
  /** An error fails the final transaction after all of its writes, as a failed COMMIT would. */
  finalCommit?: () => Error | undefined;
}

export interface SagaDeps {
  db: Db;
  saga: SagaStore;
  budgets: BudgetsRowStore;
  vaults: VaultsStore;
  payments: PaymentsStore;
  grants: BudgetGrantsStore;
  audit: AuditStore;
  clock: () => Date;
  faults: BudgetsFaults;
  /** A saga untouched this long is abandoned and reaped. */
  staleMs: number;
  logger?: Logger;
}

type Steps = { name: StepName; state: StepState }[];

export const STEPS: readonly StepName[] = ["vault", "agent_principal", "policy"];

/** A newer attempt (a retry, or the reaper) took the saga over: this one must stop writing. */
class SagaFenced extends Error {}

/** The grant's vault became a closed or declined budget's while its saga ran. */
class ParentGone extends Error {}

/** The parent vault already has as many items waiting for its owner as it may. */
class AwaitingFull extends Error {}

function fenced(): never {
  return fail(Reason.VAULT_CONTENTION, "this provisioning attempt was taken over by a newer one; retry with the same idempotency_key");
}

/** Runs one saga step and records it as done on the budget, in one transaction. */
async function runStep(deps: SagaDeps, b: BudgetRecord, name: StepName, steps: Steps, at: Date): Promise<void> {
  await deps.db.transaction(async (trx) => {
    if (!(await deps.saga.holdsAttempt(trx, b.id, b.attempt))) throw new SagaFenced();
    const recorded = steps.map((s) => (s.name === name ? { name, state: "done" as const } : s));
    const fault = deps.faults.step?.(name, "run");
    if (fault) throw fault;
    if (name === "vault") {
      const parent = (await deps.vaults.findVault(trx, b.parentVaultId))!;
      await deps.saga.insertChildVault(trx, { id: b.vaultId, ownerUserId: b.userId, parentVaultId: b.parentVaultId, currency: parent.currency, at });
    } else if (name === "agent_principal") {
      await deps.saga.insertAgentPrincipal(trx, {
        id: b.agentPrincipalId,
        userId: b.userId,
        parentAgentId: b.parentAgentId,
        vaultId: b.vaultId,
        displayName: b.params.displayName,
        at,
      });
    } else {
      const p = b.params;
      await deps.saga.insertPolicy(
        trx,
        b.vaultId,
        p.purpose,
        {
          status: "draft",
          amountCapCentsPerTx: p.amountCapCentsPerTx,
          amountCapCentsPerDay: p.amountCapCentsPerDay,
          amountCapCentsLifetime: p.amountCapCentsLifetime,
          stepUpAmountCents: p.stepUpAmountCents,
          chainAllowlist: p.chainAllowlist,
          timeWindowEnd: p.timeWindowEnd ? new Date(p.timeWindowEnd) : null,
        },
        0,
        at,
      );
    }
    await deps.budgets.updateBudget(trx, b.id, { steps: recorded }, at);
  });
}

export async function compensateStep(deps: SagaDeps, b: BudgetRecord, name: StepName, trx?: Knex.Transaction): Promise<void> {
  const work = async (conn: Knex.Transaction) => {
    const fault = deps.faults.step?.(name, "compensate");
    if (fault) throw fault;
    if (name === "policy") await deps.saga.deletePolicy(conn, b.vaultId);
    else if (name === "agent_principal") await deps.saga.deleteAgentPrincipal(conn, b.agentPrincipalId);
    else await deps.saga.deleteVault(conn, b.vaultId);
  };
  if (trx) await work(trx);
  else await deps.db.transaction(work);
}

/**
 * Undoes what a failed saga created, newest first; each undo in its own transaction.
 * The report comes from what still exists in the database, not from what we hoped.
 */
async function compensate(deps: SagaDeps, b: BudgetRecord, steps: Steps) {
  const { db, saga } = deps;
  for (const step of [...steps].reverse()) {
    if (step.state !== "done") continue;
    try {
      await db.transaction(async (trx) => {
        if (!(await saga.holdsAttempt(trx, b.id, b.attempt))) throw new SagaFenced();
        await compensateStep(deps, b, step.name, trx);
      });
      step.state = "compensated";
    } catch (err) {
      if (err instanceof SagaFenced) throw err;
      step.state = "compensation_failed";
    }
  }
  let remaining: string[];
  try {
    remaining = await saga.existing(db, b);
  } catch {
    // Unknown: report every step whose undo did not succeed as still there.
    remaining = steps.filter((s) => s.state === "done" || s.state === "compensation_failed").map((s) => s.name);
  }
  const cleanup = remaining.length === 0 ? "complete" : "partial";
  const at = deps.clock();
  try {
    await db.transaction(async (trx) => {
      if (!(await saga.holdsAttempt(trx, b.id, b.attempt))) throw new SagaFenced();
      await deps.budgets.updateBudget(trx, b.id, { status: cleanup === "complete" ? "failed" : "cleanup_pending", steps, remaining }, at);
      await saga.releaseClaim(trx, b.parentVaultId, b.id);
    });
  } catch (err) {
    if (err instanceof SagaFenced) throw err;
    // The parent vault must not stay claimed; the budget keeps status provisioning, so
    // the reaper finishes its bookkeeping later.
    deps.logger?.error({ err, budgetId: b.id }, "could not record the end of a failed provisioning saga");
    await saga.releaseClaim(db, b.parentVaultId, b.id).catch((releaseErr: unknown) => {
      deps.logger?.error({ err: releaseErr, budgetId: b.id }, "could not release the parent vault of a failed provisioning saga");
    });
  }
  return { steps, cleanup, remaining };
}

/**
 * Ends a saga that failed after claiming its vault (a step, the final audit row, the final
 * commit): compensation, the claim released, the failure audited where possible, and always
 * PROVISIONING_FAILED with what is left. `failed` is the step, or "finalize" (reported, never stored).
 */
async function failSaga(
  deps: SagaDeps,
  ctx: HandlerContext,
  actor: string,
  b: BudgetRecord,
  steps: Steps,
  failed: StepName | "finalize",
  cause: unknown,
): Promise<never> {
  let provisioning: Awaited<ReturnType<typeof compensate>>;
  try {
    provisioning = await compensate(deps, b, steps);
  } catch (err) {
    if (err instanceof SagaFenced) fenced();
    throw err;
  }
  try {
    await deps.audit.append(deps.db, {
      ...callFacts(ctx),
      actor,
      action: "agent.budget.create",
      outcome: "failure",
      reason: `provisioning_failed:${failed}`,
      subject: b.agentPrincipalId,
      at: deps.clock(),
    });
  } catch (err) {
    // Nothing of the saga was kept; the agent still needs the cleanup report to retry.
    deps.logger?.error({ err, budgetId: b.id }, "could not audit a failed provisioning saga");
  }
  const reported = failed === "finalize" ? [...provisioning.steps, { name: "finalize", state: "failed" }] : provisioning.steps;
  return fail(
    Reason.PROVISIONING_FAILED,
    failed === "finalize" ? "provisioning could not be committed" : `provisioning step ${failed} failed`,
    { provisioning: { ...provisioning, steps: reported } },
    cause,
  );
}

/**
 * Why a vault makes no budgets, when it is a closed or declined budget's (a grant issued
 * on it later could otherwise move kept money on, or spend beside a refused budget);
 * undefined when it may. `b` is the vault's budget, locked by the caller.
 */
function openParent(b: BudgetRecord | undefined): string | undefined {
  if (b?.status === "closed") return "the grant's vault belongs to a closed budget";
  if (b?.status === "declined") return "the grant's vault belongs to a budget its owner declined";
  return undefined;
}

/**
 * Starts (or restarts, for a failed key) the saga: claims the parent vault or fails with contention.
 * A caller who left while it waited for a connection starts nothing; once started, the saga runs to its end.
 */
export async function startSaga(
  deps: SagaDeps,
  signal: AbortSignal,
  grantId: string,
  existing: BudgetRecord | undefined,
  params: BudgetRecord["params"],
  hash: string,
  key: string,
  now: Date,
) {
  const { budgets, grants } = deps;
  return callerTransaction(deps.db, signal, "before the budget's provisioning began", async (trx) => {
    // Budget rows before grants: the grant's vault never changes, so it is read unlocked
    // first, then the budget of that vault is locked, then the grant.
    const vaultId = usable(deps, await grants.findGrant(trx, grantId)).vaultId;
    const refusal = openParent(await budgets.findBudgetByVault(trx, vaultId, true));
    if (refusal) fail(Reason.ACCESS_DENIED, refusal);
    // Read again under lock (a descendant of the row above): another retry of the key may have
    // run its saga since `existing` was read, and only a failed one starts again. The caller answers the rest.
    const current = existing ? await budgets.lockBudget(trx, existing.id) : undefined;
    if (current && current.status !== "failed" && current.status !== "cleanup_pending") return current;
    const g = usable(deps, await grants.findGrant(trx, grantId, true));
    const parent = await deps.vaults.findVault(trx, g.vaultId);
    if (!parent || parent.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
    // A draft on a full vault is refused before any provisioning work; the final
    // transaction counts again under the vault lock, which is what holds.
    const draft = !hasFreshStepUp(g.stepUp, g.authTime ? Math.floor(g.authTime.getTime() / 1000) : 0, now);
    if (draft && (await deps.payments.countAwaitingOwner(trx, g.vaultId, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) {
      fail(Reason.POLICY_DENIED, AWAITING_MESSAGE, { limitName: AWAITING_LIMIT });
    }
    let budget: BudgetRecord;
    if (current) {
      budget = await budgets.updateBudget(
        trx,
        current.id,
        { status: "provisioning", grantId: g.id, steps: [], remaining: [], attempt: current.attempt + 1 },
        now,
      );
    } else {
      budget = {
        id: randomUUID(),
        parentVaultId: g.vaultId,
        userId: g.userId,
        parentAgentId: g.agentPrincipalId,
        grantId: g.id,
        idempotencyKey: key,
        paramsHash: hash,
        params,
        agentPrincipalId: randomUUID(),
        vaultId: randomUUID(),
        status: "provisioning",
        policyVersion: 0,
        attempt: 1,
        steps: [],
        remaining: [],
        createdAt: now,
        updatedAt: now,
        closedAt: null,
      };
      const { inserted } = await budgets.insertBudget(trx, budget);
      // The same key raced in from another call, which now provisions it (or asked for something else).
      if (!inserted) {
        const other = await budgets.findBudget(trx, g.vaultId, key);
        if (other && other.paramsHash !== hash) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with other parameters");
        fail(Reason.VAULT_CONTENTION, "the parent vault is in another provisioning sequence; retry with backoff");
      }
    }
    if (!(await deps.saga.claimVault(trx, g.vaultId, budget.id, now))) {
      fail(Reason.VAULT_CONTENTION, "the parent vault is in another provisioning sequence; retry with backoff");
    }
    return budget;
  });
}

/** Runs the three resource steps; a failed one ends the saga (failSaga). */
export async function runSteps(deps: SagaDeps, ctx: HandlerContext, actor: string, budget: BudgetRecord): Promise<Steps> {
  const steps: Steps = STEPS.map((name) => ({ name, state: "pending" }));
  for (const step of steps) {
    try {
      await deps.faults.beforeStep?.(step.name);
      await runStep(deps, budget, step.name, steps, deps.clock());
      step.state = "done";
    } catch (err) {
      if (err instanceof SagaFenced) fenced();
      step.state = "failed";
      await failSaga(deps, ctx, actor, budget, steps, step.name, err);
    }
  }
  return steps;
}

/**
 * The final transaction: active at once only with a fresh step-up on the calling grant,
 * read and locked here, so a grant revoked or a parent closed while the saga ran installs
 * nothing and unwinds the saga. Returns the installed budget.
 */
export async function finishSaga(
  deps: SagaDeps,
  ctx: HandlerContext,
  actor: string,
  budget: BudgetRecord,
  steps: Steps,
  grantId: string,
): Promise<BudgetRecord> {
  const { db, budgets, clock, faults } = deps;
  try {
    return await db.transaction(async (trx) => {
      // The parent's budget first (an ancestor before its descendants).
      const parentRefusal = openParent(await budgets.findBudgetByVault(trx, budget.parentVaultId, true));
      if (parentRefusal) throw new ParentGone(parentRefusal);
      if (!(await deps.saga.holdsAttempt(trx, budget.id, budget.attempt))) throw new SagaFenced();
      const current = stillUsable(deps, await deps.grants.findGrant(trx, grantId, true));
      const active = hasFreshStepUp(current.stepUp, current.authTime ? Math.floor(current.authTime.getTime() / 1000) : 0, clock());
      if (!active) {
        // A draft waits for the owner: it counts against the parent vault's bound, under
        // the vault lock payments take.
        await deps.vaults.lockVaults(trx, [budget.parentVaultId]);
        if ((await deps.payments.countAwaitingOwner(trx, budget.parentVaultId, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) throw new AwaitingFull();
      }
      if (active) await budgets.activatePolicy(trx, budget.vaultId, clock());
      const b = await budgets.updateBudget(
        trx,
        budget.id,
        { status: active ? "active" : "draft", policyVersion: active ? 1 : 0, steps, remaining: [] },
        clock(),
      );
      await deps.saga.releaseClaim(trx, budget.parentVaultId, budget.id);
      const auditFault = faults.finalAudit?.();
      if (auditFault) throw auditFault;
      await deps.audit.append(trx, {
        ...callFacts(ctx),
        actor,
        action: "agent.budget.create",
        outcome: "success",
        subject: b.agentPrincipalId,
        at: clock(),
      });
      const commitFault = faults.finalCommit?.();
      if (commitFault) throw commitFault;
      return b;
    });
  } catch (err) {
    if (err instanceof SagaFenced) fenced();
    if (!(err instanceof GrantGone) && !(err instanceof ParentGone) && !(err instanceof AwaitingFull)) {
      // A COMMIT that failed on the wire may still have committed: then it succeeded.
      const after = await budgets.findBudget(db, budget.parentVaultId, budget.idempotencyKey).catch(() => undefined);
      if (after && after.attempt === budget.attempt && (after.status === "draft" || after.status === "active")) return after;
      return failSaga(deps, ctx, actor, budget, steps, "finalize", err);
    }
    await compensate(deps, budget, steps).catch((e: unknown) => {
      if (e instanceof SagaFenced) fenced();
      throw e;
    });
    if (err instanceof AwaitingFull) {
      await auditOutside(deps, ctx, actor, "agent.budget.create", "failure", `policy_denied:${AWAITING_LIMIT}`, budget.agentPrincipalId);
      fail(Reason.POLICY_DENIED, `${AWAITING_MESSAGE}; nothing was kept`, { limitName: AWAITING_LIMIT });
    }
    if (err instanceof ParentGone) {
      await auditOutside(deps, ctx, actor, "agent.budget.create", "failure", "access_denied", budget.agentPrincipalId);
      fail(Reason.ACCESS_DENIED, `${err.message}; nothing was kept`);
    }
    await auditOutside(deps, ctx, actor, "agent.budget.create", "failure", "grant_revoked", budget.agentPrincipalId);
    return fail(Reason.INVALID_TOKEN, "the grant was revoked while the budget was being provisioned; nothing was kept");
  }
}
