import { randomUUID } from "node:crypto";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Knex } from "knex";
import type { Logger } from "pino";
import {
  BudgetsService,
  BudgetStatus,
  Decision,
  type BudgetSchema,
  type PaymentSchema,
} from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { kRequestId } from "../context.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import { auditCursor, auditSince } from "../audit/service.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import { formatWatermark, type CursorCodec } from "../paging.js";
import { brokenRules, decide, evaluatePayment, hasFreshStepUp, hasScope, MAX_AMOUNT, RULE_MESSAGES, utcDayStart, type Evaluation, type Rule } from "./policy.js";
import type { BudgetsStore } from "./store.js";
import type { BudgetRecord, PaymentRecord, StepName, StepState, VaultRecord } from "./records.js";
import type { AgentGrant } from "../grants/budget-grants-store.js";
import type { AgentTokenClaims } from "../grants/access-token.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { getMoneyView } from "./money-view.js";
import { BUDGET_STATUS, limitsView, PAYMENT_STATUS } from "./views.js";
import { checkBudgetInput, checkFundInput, checkPaymentInput } from "./validation.js";
import { UUID } from "../uuid.js";
import { sha256Hex } from "../../lib/crypto.js";
import { canonicalJson, derivedId } from "./ids.js";
import { CLOCK_SKEW_SECONDS } from "../keys/lifecycle.js";

/**
 * Test-only seams for failures that cannot be caused for real (STYLE: fault injection
 * through a deliberate seam).
 */
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

export interface BudgetsServiceDeps {
  db: Db;
  store: BudgetsStore;
  audit: AuditStore;
  rateLimits: RateLimitStore;
  cursors: CursorCodec;
  clock: () => Date;
  /** Verifies agent access tokens (signature, issuer, audience, type, lifetime); grant state is read here. */
  verifier: { verify(token: string): Promise<AgentTokenClaims | undefined> };
  /** Turns the dashboard's web session token into the signed-in owner. */
  sessions: SessionVerifier;
  /** `{app_url}`, where owners approve step-ups. */
  appUrl: string;
  /** DESIGN 4.4: provisioning starts per parent vault per minute (default 10). */
  provisioningLimitPerMinute: number;
  /** A saga untouched this long is abandoned and reaped (default 300 s). */
  staleProvisioningSeconds?: number;
  faults?: BudgetsFaults;
  /** Test-only seam, the same one the audit store honours (AuditStoreOptions.appendFault). */
  auditFault?: () => Error | undefined;
  logger?: Logger;
}

export const SCOPES = {
  budgetCreate: "agent:budget:create",
  paymentsInitiate: "payments:initiate",
  paymentsSimulate: "payments:simulate",
  accountsRead: "accounts:read",
  auditStream: "audit:stream",
} as const;

const STEPS: readonly StepName[] = ["vault", "agent_principal", "policy"];
/** At most this many payments awaiting approval and draft budgets, together, per vault. */
export const MAX_AWAITING_OWNER = 50;
const AWAITING_LIMIT = "pending_approvals";
/** The most pending approvals one page lists (ListPendingApprovals' limit). */
const MAX_PENDING_PAGE = 100;
/** The most stranded vaults ListStrandedFunds names. */
const MAX_STRANDED = 100;
const AWAITING_MESSAGE = `${AWAITING_LIMIT}: the vault already has ${MAX_AWAITING_OWNER} payments and draft budgets waiting for its owner`;
const MAX_AUDIT_LIMIT = 500;

type Trx = Knex.Transaction;

/** Who calls FundBudget or CloseBudget: an agent (its grant not yet read) or the signed-in owner. */
type BudgetCaller = { kind: "agent"; grantId: string } | { kind: "owner"; userId: string };

/** A newer attempt (a retry, or the reaper) took the saga over: this one must stop writing. */
class SagaFenced extends Error {}

/** The calling grant stopped being usable while its saga ran (revoked, superseded, user inactive). */
class GrantGone extends Error {}

/** The grant's vault became a closed or declined budget's while its saga ran. */
class ParentGone extends Error {}

/** The parent vault already has as many items waiting for its owner as it may. */
class AwaitingFull extends Error {}

export interface BudgetsService extends ServiceImpl<typeof BudgetsService> {
  /** One reaper pass: finishes partial cleanups and abandoned sagas; returns how many. */
  reap(): Promise<number>;
}

export function createBudgetsService(deps: BudgetsServiceDeps): BudgetsService {
  const { db, store, audit, clock } = deps;
  const faults = deps.faults ?? {};
  const staleMs = (deps.staleProvisioningSeconds ?? 300) * 1000;

  const actorOf = (g: AgentGrant) => `agent:${g.agentPrincipalId}`;

  async function auditOutside(ctx: HandlerContext, actor: string, action: string, outcome: "success" | "failure", reason: string, subject: string) {
    try {
      await audit.append(db, { requestId: ctx.values.get(kRequestId), actor, action, outcome, reason, subject, at: clock() });
    } catch (err) {
      fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
    }
  }

  /**
   * Verifies the caller's access token (ES256, iss, aud, typ, lifetime, skew) and that it
   * carries `scope`. The grant it names is not trusted yet: each RPC reads it afresh with
   * `usable`, inside the transaction that acts on it where there is one.
   */
  async function claimsFor(accessToken: string, scope: string): Promise<AgentTokenClaims> {
    const claims = accessToken ? await deps.verifier.verify(accessToken) : undefined;
    if (!claims) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
    if (typeof claims.scope !== "string" || !hasScope(claims.scope.split(" "), scope)) fail(Reason.INSUFFICIENT_SCOPE, `the grant lacks the ${scope} scope`);
    return claims;
  }

  /** The grant as read from the database, refused unless it is active, unexpired and its user active (spec 3.2). */
  function usable(g: AgentGrant | undefined): AgentGrant {
    if (!g) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
    if (g.state !== "active") fail(Reason.INVALID_TOKEN, `the grant has been ${g.state}`);
    if (!g.userActive) fail(Reason.INVALID_TOKEN, "the user's account is not active");
    if (g.expiresAt.getTime() + CLOCK_SKEW_SECONDS * 1000 < clock().getTime()) fail(Reason.INVALID_TOKEN, "the access token has expired");
    return g;
  }

  /** usable(), for a grant re-read in a later step of a saga: a refusal there must unwind the saga first. */
  function stillUsable(g: AgentGrant | undefined): AgentGrant {
    try {
      return usable(g);
    } catch {
      throw new GrantGone();
    }
  }

  function budgetView(b: BudgetRecord, currency = ""): MessageInitShape<typeof BudgetSchema> {
    const p = b.params;
    return {
      budgetId: b.id,
      agentPrincipalId: b.agentPrincipalId,
      vaultId: b.vaultId,
      policyVersion: BigInt(b.policyVersion),
      status: BUDGET_STATUS[b.status] ?? BudgetStatus.DRAFT,
      createdAt: timestampFromDate(b.createdAt),
      displayName: b.params.displayName,
      limits: limitsView(p, currency),
    };
  }

  function stepUpUrl(p: PaymentRecord): string {
    const agent = p.agentPrincipalId ? `/${encodeURIComponent(p.agentPrincipalId)}` : "";
    return `${deps.appUrl}/dashboard/agents${agent}?payment=${encodeURIComponent(p.id)}`;
  }

  function paymentView(p: PaymentRecord): MessageInitShape<typeof PaymentSchema> {
    const status = PAYMENT_STATUS[p.status];
    return {
      paymentId: p.id,
      vaultId: p.vaultId,
      status,
      amountCents: BigInt(p.amountCents),
      currency: p.currency,
      counterparty: { address: p.address, chain: p.chain, token: p.token },
      createdAt: timestampFromDate(p.createdAt),
      stepUpUrl: p.status === "completed" || p.status === "declined" ? "" : stepUpUrl(p),
      agentPrincipalId: p.agentPrincipalId ?? "",
    };
  }

  /** Runs one saga step and records it as done on the budget, in one transaction. */
  async function runStep(b: BudgetRecord, name: StepName, steps: { name: StepName; state: StepState }[], at: Date): Promise<void> {
    await db.transaction(async (trx) => {
      if (!(await store.saga.holdsAttempt(trx, b.id, b.attempt))) throw new SagaFenced();
      const recorded = steps.map((s) => (s.name === name ? { name, state: "done" as const } : s));
      const fault = faults.step?.(name, "run");
      if (fault) throw fault;
      if (name === "vault") {
        const parent = (await store.vaults.findVault(trx, b.parentVaultId))!;
        await store.saga.insertChildVault(trx, { id: b.vaultId, ownerUserId: b.userId, parentVaultId: b.parentVaultId, currency: parent.currency, at });
      } else if (name === "agent_principal") {
        await store.saga.insertAgentPrincipal(trx, {
          id: b.agentPrincipalId,
          userId: b.userId,
          parentAgentId: b.parentAgentId,
          vaultId: b.vaultId,
          displayName: b.params.displayName,
          at,
        });
      } else {
        const p = b.params;
        await store.saga.insertPolicy(
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
      await store.budgets.updateBudget(trx, b.id, { steps: recorded }, at);
    });
  }

  async function compensateStep(b: BudgetRecord, name: StepName, trx?: Trx): Promise<void> {
    const work = async (conn: Trx) => {
      const fault = faults.step?.(name, "compensate");
      if (fault) throw fault;
      if (name === "policy") await store.saga.deletePolicy(conn, b.vaultId);
      else if (name === "agent_principal") await store.saga.deleteAgentPrincipal(conn, b.agentPrincipalId);
      else await store.saga.deleteVault(conn, b.vaultId);
    };
    if (trx) await work(trx);
    else await db.transaction(work);
  }

  /**
   * Undoes what a failed saga created, newest first; each undo in its own transaction.
   * The report comes from what still exists in the database, not from what we hoped.
   */
  async function compensate(b: BudgetRecord, steps: { name: StepName; state: StepState }[]) {
    for (const step of [...steps].reverse()) {
      if (step.state !== "done") continue;
      try {
        await db.transaction(async (trx) => {
          if (!(await store.saga.holdsAttempt(trx, b.id, b.attempt))) throw new SagaFenced();
          await compensateStep(b, step.name, trx);
        });
        step.state = "compensated";
      } catch (err) {
        if (err instanceof SagaFenced) throw err;
        step.state = "compensation_failed";
      }
    }
    let remaining: string[];
    try {
      remaining = await store.saga.existing(db, b);
    } catch {
      // Unknown: report every step whose undo did not succeed as still there.
      remaining = steps.filter((s) => s.state === "done" || s.state === "compensation_failed").map((s) => s.name);
    }
    const cleanup = remaining.length === 0 ? "complete" : "partial";
    const at = clock();
    try {
      await db.transaction(async (trx) => {
        if (!(await store.saga.holdsAttempt(trx, b.id, b.attempt))) throw new SagaFenced();
        await store.budgets.updateBudget(trx, b.id, { status: cleanup === "complete" ? "failed" : "cleanup_pending", steps, remaining }, at);
        await store.saga.releaseClaim(trx, b.parentVaultId, b.id);
      });
    } catch (err) {
      if (err instanceof SagaFenced) throw err;
      // The saga ends here whatever happens: the parent vault must not stay claimed. The
      // budget keeps status provisioning, so the reaper finishes its bookkeeping later.
      deps.logger?.error({ err, budgetId: b.id }, "could not record the end of a failed provisioning saga");
      await store.saga.releaseClaim(db, b.parentVaultId, b.id).catch((releaseErr: unknown) => {
        deps.logger?.error({ err: releaseErr, budgetId: b.id }, "could not release the parent vault of a failed provisioning saga");
      });
    }
    return { steps, cleanup, remaining };
  }

  /**
   * Ends a saga that failed after claiming its vault, whatever failed (a step, the final
   * audit row, the final commit): compensation, then the claim released, then the
   * failure audited where possible, and always PROVISIONING_FAILED with what is left.
   * `failed` names the failed step, or "finalize" for the final transaction (reported
   * after the three resource steps, never stored).
   */
  async function failSaga(
    ctx: HandlerContext,
    actor: string,
    b: BudgetRecord,
    steps: { name: StepName; state: StepState }[],
    failed: StepName | "finalize",
    cause: unknown,
  ): Promise<never> {
    let provisioning: Awaited<ReturnType<typeof compensate>>;
    try {
      provisioning = await compensate(b, steps);
    } catch (err) {
      if (err instanceof SagaFenced) fenced();
      throw err;
    }
    try {
      await audit.append(db, {
        requestId: ctx.values.get(kRequestId),
        actor,
        action: "agent.budget.create",
        outcome: "failure",
        reason: `provisioning_failed:${failed}`,
        subject: b.agentPrincipalId,
        at: clock(),
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
   * undefined when it may. `b` is the vault's budget, locked by the caller so a close or
   * decline is ordered against the saga: one that commits first is seen.
   */
  function openParent(b: BudgetRecord | undefined): string | undefined {
    if (b?.status === "closed") return "the grant's vault belongs to a closed budget";
    if (b?.status === "declined") return "the grant's vault belongs to a budget its owner declined";
    return undefined;
  }

  /** Starts (or restarts, for a failed key) the saga: claims the parent vault or fails with contention. */
  async function startSaga(grantId: string, existing: BudgetRecord | undefined, params: BudgetRecord["params"], hash: string, key: string, now: Date) {
    return db.transaction(async (trx) => {
      // Budget rows before grants (the lock order): the grant's vault never changes, so
      // it is read unlocked first, then the budget of that vault is locked, then the grant.
      const vaultId = usable(await store.grants.findGrant(trx, grantId)).vaultId;
      const refusal = openParent(await store.budgets.findBudgetByVault(trx, vaultId, true));
      if (refusal) fail(Reason.ACCESS_DENIED, refusal);
      const g = usable(await store.grants.findGrant(trx, grantId, true));
      const parent = await store.vaults.findVault(trx, g.vaultId);
      if (!parent || parent.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
      // A draft on a full vault is refused before any provisioning work; the final
      // transaction counts again under the vault lock, which is what holds.
      const draft = !hasFreshStepUp(g.stepUp, g.authTime ? Math.floor(g.authTime.getTime() / 1000) : 0, now);
      if (draft && (await store.payments.countAwaitingOwner(trx, g.vaultId, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) {
        fail(Reason.POLICY_DENIED, AWAITING_MESSAGE, { limitName: AWAITING_LIMIT });
      }
      let budget: BudgetRecord;
      if (existing) {
        budget = await store.budgets.updateBudget(trx, existing.id, { status: "provisioning", grantId: g.id, steps: [], remaining: [], attempt: existing.attempt + 1 }, now);
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
        const { inserted } = await store.budgets.insertBudget(trx, budget);
        // The same key raced in from another call, which now provisions it.
        if (!inserted) fail(Reason.VAULT_CONTENTION, "the parent vault is in another provisioning sequence; retry with backoff");
      }
      if (!(await store.saga.claimVault(trx, g.vaultId, budget.id, now))) {
        fail(Reason.VAULT_CONTENTION, "the parent vault is in another provisioning sequence; retry with backoff");
      }
      return budget;
    });
  }

  /** One reaper pass: finishes partial cleanups and abandoned sagas; returns how many. */
  async function reap(): Promise<number> {
    const now = clock();
    let cleaned = 0;
    for (const candidate of await store.saga.listReapable(db, new Date(now.getTime() - staleMs))) {
      try {
        await db.transaction(async (trx) => {
          // Re-read under lock: a retry of the key may have restarted it meanwhile.
          const row = await store.budgets.lockBudget(trx, candidate.id);
          const stale = row && row.status === "provisioning" && row.updatedAt.getTime() < now.getTime() - staleMs;
          if (!row || (row.status !== "cleanup_pending" && !stale)) return;
          for (const name of [...STEPS].reverse()) await compensateStep(candidate, name, trx);
          const steps = STEPS.map((name) => ({ name, state: "compensated" as const }));
          // Bumping the attempt fences the abandoned saga if it ever wakes up.
          await store.budgets.updateBudget(trx, candidate.id, { status: "failed", steps, remaining: [], attempt: row.attempt + 1 }, now);
          await store.saga.releaseClaim(trx, candidate.parentVaultId, candidate.id);
          await audit.append(trx, { requestId: randomUUID(), actor: "reaper", action: "agent.budget.cleanup", outcome: "success", subject: candidate.agentPrincipalId, at: now });
          cleaned++;
        });
      } catch {
        // Left for the next pass; the budget still reports its remaining resources.
      }
    }
    return cleaned;
  }

  /**
   * FundBudget's and CloseBudget's caller, before any transaction: exactly one of an
   * agent's access token (verified, with agent:budget:create; its grant is read later,
   * inside the acting transaction) and the owner's web session (with a fresh step-up).
   */
  async function budgetCaller(accessToken: string, sessionToken: string, what: string): Promise<BudgetCaller> {
    if (accessToken && sessionToken) fail(Reason.INVALID_REQUEST, "set exactly one of access_token and session_token");
    if (sessionToken) {
      const owner = await deps.sessions.verify(sessionToken);
      if (!owner.stepUpFresh) fail(Reason.ACCESS_DENIED, `${what} needs a fresh step-up`);
      return { kind: "owner", userId: owner.userId };
    }
    const claims = await claimsFor(accessToken, SCOPES.budgetCreate);
    return { kind: "agent", grantId: claims.jti };
  }

  /**
   * Inside the acting transaction: the budget of `vaultId`, locked FOR UPDATE (every fund
   * and close of one budget is ordered by this lock), and the caller. An agent acts only on
   * budgets under its grant's own vault (the budget's parent) and of its grant's user; the
   * owner on their own budgets. Another user's budget, a vault that is no budget and an
   * unfinished one are all "no such budget".
   *
   * Locks are taken in one order everywhere: budget rows (an ancestor before its
   * descendants), then grants (the caller's, then those a close revokes), then vaults by
   * id; a payment takes its grant, then its one vault. So the agent's grant is read once
   * to refuse a dead one before any lock, and read again under lock (FOR NO KEY UPDATE:
   * a revocation committed first is seen, none commits in between) after the budget's.
   */
  async function actingOn(trx: Trx, caller: BudgetCaller, vaultId: string, seen: { actor?: string }) {
    let userId: string;
    let grantVaultId: string | undefined;
    if (caller.kind === "agent") {
      const g = usable(await store.grants.findGrant(trx, caller.grantId));
      seen.actor = actorOf(g);
      userId = g.userId;
      grantVaultId = g.vaultId;
    } else {
      seen.actor = `user:${caller.userId}`;
      userId = caller.userId;
    }
    const budget = await store.budgets.findBudgetByVault(trx, vaultId, true);
    if (!budget || budget.userId !== userId) fail(Reason.NOT_FOUND, "no such budget");
    if (grantVaultId !== undefined && budget.parentVaultId !== grantVaultId) {
      fail(Reason.GRANT_REQUIRED, "the grant's vault is not this budget's parent vault: fund and close a budget with a grant on the vault it was created under");
    }
    if (caller.kind === "agent") usable(await store.grants.findGrant(trx, caller.grantId, true));
    return { budget, actor: seen.actor, agent: caller.kind === "agent" };
  }

  /** The budget's vault and its parent, locked (lockVaults' order), both the budget owner's. */
  async function lockBudgetVaults(trx: Trx, b: BudgetRecord) {
    const locked = await store.vaults.lockVaults(trx, [b.parentVaultId, b.vaultId]);
    const parent = locked.get(b.parentVaultId);
    const child = locked.get(b.vaultId);
    if (!parent || !child || parent.ownerUserId !== b.userId || child.ownerUserId !== b.userId) fail(Reason.NOT_FOUND, "no such budget");
    // A child vault is made in its parent's currency and neither ever changes.
    if (parent.currency !== child.currency) throw new Error(`budget vault ${b.vaultId} is in ${child.currency}, its parent in ${parent.currency}`);
    return { parent, child };
  }

  /**
   * Moves everything a budget's vault holds back to its parent vault (ledger kind
   * budget.sweep), when it holds anything. `vaults` holds both rows, locked; their balances
   * are updated in it. `why` makes the movement's id: a budget is declined at most once
   * and closed at most once.
   */
  async function sweepInto(trx: Trx, b: BudgetRecord, vaults: Map<string, VaultRecord>, why: "close" | "decline" | "kept", at: Date): Promise<{ sweptCents: number; transferId: string }> {
    const parent = vaults.get(b.parentVaultId)!;
    const child = vaults.get(b.vaultId)!;
    if (child.balanceCents <= 0) return { sweptCents: 0, transferId: "" };
    if (parent.balanceCents + child.balanceCents > MAX_AMOUNT) fail(Reason.INVALID_REQUEST, "the parent vault's balance would exceed 2^53-1 cents");
    // Kept money can be swept more than once (the operator may credit a closed vault), so
    // each such sweep is a movement of its own; a close or decline happens once.
    const transferId = why === "kept" ? randomUUID() : derivedId("budget.sweep", b.vaultId, why);
    const moved = await store.vaults.moveBetweenVaults(trx, child, parent, child.balanceCents, { id: transferId, kind: "budget.sweep", reference: `budget:${b.vaultId}`, at });
    if (!moved.moved) throw new Error(`budget sweep ${transferId} was already in the ledger`);
    vaults.set(parent.id, moved.to);
    vaults.set(child.id, moved.from);
    return { sweptCents: child.balanceCents, transferId };
  }

  /** sweepInto for one budget, locking its vault and its parent first. */
  async function sweep(trx: Trx, b: BudgetRecord, why: "close" | "decline", at: Date) {
    const { parent, child } = await lockBudgetVaults(trx, b);
    return sweepInto(trx, b, new Map([[parent.id, parent], [child.id, child]]), why, at);
  }

  /** A refusal made once the caller was known is audited (the token's own refusals are not: there is no actor). */
  async function auditRefusal(ctx: HandlerContext, actor: string | undefined, action: string, subject: string, err: unknown): Promise<void> {
    const reason = errorDetailOf(err)?.reason;
    if (!actor || reason === undefined || reason === Reason.INVALID_TOKEN || reason === Reason.AUDIT_UNAVAILABLE) return;
    await auditOutside(ctx, actor, action, "failure", Reason[reason].toLowerCase(), subject);
  }

  return {
    async createBudget(req, ctx) {
      const now = clock();
      const claims = await claimsFor(req.accessToken, SCOPES.budgetCreate);
      // Replays and rate limits answer only a live grant; each saga transaction re-reads it under lock.
      const g = usable(await store.grants.findGrant(db, claims.jti));
      const params = checkBudgetInput(
        {
          purpose: req.purpose,
          displayName: req.displayName,
          amountCapCentsPerTx: optNumber(req.amountCapCentsPerTx),
          amountCapCentsPerDay: optNumber(req.amountCapCentsPerDay),
          amountCapCentsLifetime: optNumber(req.amountCapCentsLifetime),
          stepUpAmountCents: optNumber(req.stepUpAmountCents),
          chainAllowlist: req.chainAllowlist,
          timeWindowEnd: req.timeWindowEnd ? timestampDate(req.timeWindowEnd) : undefined,
          idempotencyKey: req.idempotencyKey,
        },
        now,
      );
      const hash = sha256Hex(canonicalJson(params));
      const actor = actorOf(g);

      // DESIGN 4.1: a replay answers with the same ids and the budget's current status.
      const existing = await store.budgets.findBudget(db, g.vaultId, req.idempotencyKey);
      if (existing) {
        if (existing.paramsHash !== hash) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with other parameters");
        if (existing.status === "draft" || existing.status === "active") return { budget: budgetView(existing) };
        // spec 2.2 knows only draft and active; a declined budget is not reprovisioned under its key.
        if (existing.status === "declined") fail(Reason.ACCESS_DENIED, "the vault owner declined this budget");
        // Nor is a closed one: closing is final.
        if (existing.status === "closed") fail(Reason.ACCESS_DENIED, "this budget was closed");
        if (existing.status === "provisioning") fail(Reason.VAULT_CONTENTION, "this budget is being provisioned; retry with backoff");
      }

      // DESIGN 4.4: only starts that pass validation count, replays do not.
      const limit = await deps.rateLimits.hit(`budget-provisioning:${g.vaultId}`, deps.provisioningLimitPerMinute, 60, now);
      if (!limit.allowed) {
        await auditOutside(ctx, actor, "agent.budget.create", "failure", "rate_limited", g.vaultId);
        fail(Reason.RATE_LIMITED, "too many budget provisioning starts for this vault", { retryAfterSeconds: 60 });
      }

      let budget: BudgetRecord;
      try {
        budget = await startSaga(g.id, existing, params, hash, req.idempotencyKey, now);
      } catch (err) {
        const detail = errorDetailOf(err);
        const reason = detail?.reason;
        const limit = detail?.limitName ? `:${detail.limitName}` : "";
        await auditOutside(ctx, actor, "agent.budget.create", "failure", reason ? `${Reason[reason].toLowerCase()}${limit}` : "internal", g.vaultId);
        throw err;
      }

      const steps: { name: StepName; state: StepState }[] = STEPS.map((name) => ({ name, state: "pending" }));
      for (const step of steps) {
        try {
          await faults.beforeStep?.(step.name);
          await runStep(budget, step.name, steps, clock());
          step.state = "done";
        } catch (err) {
          if (err instanceof SagaFenced) fenced();
          step.state = "failed";
          await failSaga(ctx, actor, budget, steps, step.name, err);
        }
      }

      // spec 3.1 / DESIGN 4.1: active at once only with a fresh step-up on the calling grant,
      // read (and locked) in the transaction that activates: a grant revoked while
      // the saga ran installs nothing, and its saga is unwound.
      let done: BudgetRecord;
      try {
        done = await db.transaction(async (trx) => {
          // The parent's budget first (an ancestor before its descendants): a close or
          // decline of it that committed while the saga ran unwinds the saga.
          const parentRefusal = openParent(await store.budgets.findBudgetByVault(trx, budget.parentVaultId, true));
          if (parentRefusal) throw new ParentGone(parentRefusal);
          if (!(await store.saga.holdsAttempt(trx, budget.id, budget.attempt))) throw new SagaFenced();
          const current = stillUsable(await store.grants.findGrant(trx, g.id, true));
          const active = hasFreshStepUp(current.stepUp, current.authTime ? Math.floor(current.authTime.getTime() / 1000) : 0, clock());
          if (!active) {
            // A draft waits for the owner: it counts against the parent vault's bound,
            // under the vault lock payments take (grant, then vault: the lock order).
            await store.vaults.lockVaults(trx, [budget.parentVaultId]);
            if ((await store.payments.countAwaitingOwner(trx, budget.parentVaultId, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) throw new AwaitingFull();
          }
          if (active) await store.budgets.activatePolicy(trx, budget.vaultId, clock());
          const b = await store.budgets.updateBudget(trx, budget.id, { status: active ? "active" : "draft", policyVersion: active ? 1 : 0, steps, remaining: [] }, clock());
          await store.saga.releaseClaim(trx, budget.parentVaultId, budget.id);
          const auditFault = faults.finalAudit?.();
          if (auditFault) throw auditFault;
          await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor, action: "agent.budget.create", outcome: "success", subject: b.agentPrincipalId, at: clock() });
          const commitFault = faults.finalCommit?.();
          if (commitFault) throw commitFault;
          return b;
        });
      } catch (err) {
        if (err instanceof SagaFenced) fenced();
        if (!(err instanceof GrantGone) && !(err instanceof ParentGone) && !(err instanceof AwaitingFull)) {
          // A COMMIT that failed on the wire may still have committed: then it succeeded.
          const after = await store.budgets.findBudget(db, budget.parentVaultId, budget.idempotencyKey).catch(() => undefined);
          if (after && after.attempt === budget.attempt && (after.status === "draft" || after.status === "active")) return { budget: budgetView(after) };
          return failSaga(ctx, actor, budget, steps, "finalize", err);
        }
        await compensate(budget, steps).catch((e: unknown) => {
          if (e instanceof SagaFenced) fenced();
          throw e;
        });
        if (err instanceof AwaitingFull) {
          await auditOutside(ctx, actor, "agent.budget.create", "failure", `policy_denied:${AWAITING_LIMIT}`, budget.agentPrincipalId);
          fail(Reason.POLICY_DENIED, `${AWAITING_MESSAGE}; nothing was kept`, { limitName: AWAITING_LIMIT });
        }
        if (err instanceof ParentGone) {
          await auditOutside(ctx, actor, "agent.budget.create", "failure", "access_denied", budget.agentPrincipalId);
          fail(Reason.ACCESS_DENIED, `${err.message}; nothing was kept`);
        }
        await auditOutside(ctx, actor, "agent.budget.create", "failure", "grant_revoked", budget.agentPrincipalId);
        fail(Reason.INVALID_TOKEN, "the grant was revoked while the budget was being provisioned; nothing was kept");
      }
      return { budget: budgetView(done) };
    },

    async activateBudget(req, ctx) {
      const now = clock();
      const owner = await deps.sessions.verify(req.sessionToken);
      if (!owner.stepUpFresh) fail(Reason.ACCESS_DENIED, "activating a budget needs a fresh step-up");
      // A malformed id is refused like an unknown one (and never reaches a uuid column).
      if (!UUID.test(req.agentPrincipalId)) fail(Reason.NOT_FOUND, "no such budget");
      const budget = await db.transaction(async (trx) => {
        const b = await store.budgets.findBudgetByAgent(trx, req.agentPrincipalId.toLowerCase(), true);
        if (!b || b.userId !== owner.userId) fail(Reason.NOT_FOUND, "no such budget");
        if (b.status === "declined") fail(Reason.NOT_FOUND, "the budget was declined");
        if (b.status === "closed") fail(Reason.NOT_FOUND, "the budget was closed");
        if (b.status === "active") return b;
        await store.budgets.activatePolicy(trx, b.vaultId, now);
        const updated = await store.budgets.updateBudget(trx, b.id, { status: "active", policyVersion: 1 }, now);
        await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor: `user:${owner.userId}`, action: "agent.budget.activate", outcome: "success", subject: b.agentPrincipalId, at: now });
        return updated;
      });
      return { budget: budgetView(budget) };
    },

    async initiatePayment(req, ctx) {
      const claims = await claimsFor(req.accessToken, SCOPES.paymentsInitiate);
      const input = paymentInput(req.payment);
      const hash = sha256Hex(canonicalJson(input));
      type Outcome = { actor: string; payment: PaymentRecord; denied?: undefined } | { actor: string; vaultId: string; denied: Exclude<Rule, "step_up_amount"> | typeof AWAITING_LIMIT };
      const outcome = await db.transaction(async (trx): Promise<Outcome> => {
        const now = clock();
        // The grant and the vault are locked: a revocation committed
        // first is seen, none commits in between, and every payment of the vault is ordered.
        const context = await store.payments.lockPaymentContext(trx, claims.jti, utcDayStart(now));
        const g = usable(context?.grant);
        if (!context || context.vault.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
        const actor = actorOf(g);
        const { vault, usage, policy } = context;
        if (input.currency !== vault.currency) fail(Reason.INVALID_REQUEST, `currency must be the vault's currency ${vault.currency}`);
        const prior = await store.payments.findPayment(trx, vault.id, input.idempotencyKey);
        if (prior && prior.paramsHash !== hash) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with other parameters");
        if (prior?.status === "declined") fail(Reason.ACCESS_DENIED, "the vault owner declined this payment");
        if (prior && prior.status !== "approved") return { actor, payment: prior };

        const evaluation = evaluatePayment(
          policy,
          { balanceCents: vault.balanceCents, spentTodayCents: usage.today, spentLifetimeCents: usage.lifetime },
          { amountCents: input.amountCents, chain: input.chain },
          now,
          { stepUpApproved: prior?.status === "approved" },
        );
        if (evaluation.decision === "deny") return { actor, vaultId: vault.id, denied: evaluation.rule };
        // A new payment waiting for the owner counts against the vault's bound (the vault row is locked).
        if (evaluation.decision === "step_up" && !prior && (await store.payments.countAwaitingOwner(trx, vault.id, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) {
          return { actor, vaultId: vault.id, denied: AWAITING_LIMIT };
        }
        let payment: PaymentRecord;
        if (prior) {
          payment = await store.payments.setPaymentStatus(trx, prior.id, "completed", now);
        } else {
          payment = {
            id: randomUUID(),
            vaultId: vault.id,
            userId: g.userId,
            agentPrincipalId: g.agentPrincipalId,
            grantId: g.id,
            idempotencyKey: input.idempotencyKey,
            paramsHash: hash,
            address: input.address,
            chain: input.chain,
            token: input.token,
            amountCents: input.amountCents,
            currency: input.currency,
            status: evaluation.decision === "step_up" ? "pending_step_up" : "completed",
            createdAt: now,
          };
          await store.payments.insertPayment(trx, payment);
        }
        // The balance and the running totals the caps read move together, under the vault lock.
        if (payment.status === "completed") await store.payments.recordSpend(trx, vault, payment, now);
        await audit.append(trx, {
          requestId: ctx.values.get(kRequestId),
          actor,
          action: payment.status === "completed" ? "payments.initiate" : "payments.initiate.pending_step_up",
          outcome: "success",
          subject: payment.id,
          at: now,
        });
        return { actor, payment };
      });
      if (outcome.denied !== undefined) {
        const rule = outcome.denied;
        await auditOutside(ctx, outcome.actor, "payments.initiate", "failure", rule === "balance" ? "insufficient_funds" : `policy_denied:${rule}`, outcome.vaultId);
        if (rule === "balance") fail(Reason.INSUFFICIENT_FUNDS, "the vault's available balance is below the amount");
        if (rule === AWAITING_LIMIT) fail(Reason.POLICY_DENIED, AWAITING_MESSAGE, { limitName: rule });
        // DESIGN 4.4: the limit is named; no remaining allowance is revealed.
        fail(Reason.POLICY_DENIED, rule, { limitName: rule });
      }
      return { payment: paymentView(outcome.payment) };
    },

    async simulatePayment(req, ctx) {
      const claims = await claimsFor(req.accessToken, SCOPES.paymentsSimulate);
      const input = paymentInput(req.payment);
      const now = clock();
      // One statement reads the grant afresh with everything the decision needs, and
      // writes the read's audit row when the call will answer (audit before data).
      const auditFault = deps.auditFault?.();
      let context: Awaited<ReturnType<typeof store.payments.currentPaymentContext>>;
      try {
        context = await store.payments.currentPaymentContext(
          claims.jti,
          utcDayStart(now),
          auditFault ? undefined : { requestId: ctx.values.get(kRequestId), at: now, currency: input.currency },
        );
      } catch (err) {
        // The statement carries the audit INSERT: if it fails, the read is withheld.
        return fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
      }
      const g = usable(context?.grant);
      if (!context || context.vault.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
      const { vault, usage, policy } = context;
      if (input.currency !== vault.currency) fail(Reason.INVALID_REQUEST, `currency must be the vault's currency ${vault.currency}`);
      if (auditFault) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, auditFault);
      // Every check above passed, so the statement's guarded INSERT must have run.
      if (!context.audited) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted");
      // Every rule the payment would break, so an agent learns them all at once.
      const broken = brokenRules(
        policy,
        { balanceCents: vault.balanceCents, spentTodayCents: usage.today, spentLifetimeCents: usage.lifetime },
        { amountCents: input.amountCents, chain: input.chain },
        now,
      );
      const evaluation: Evaluation = decide(broken);
      const decision = { accept: Decision.ACCEPT, step_up: Decision.STEP_UP, deny: Decision.DENY }[evaluation.decision];
      const rule: Rule | "" = evaluation.decision === "accept" ? "" : evaluation.rule;
      return { decision, rule, brokenRules: broken.map((r) => ({ reasonId: r, message: RULE_MESSAGES[r] })) };
    },

    async approvePayment(req, ctx) {
      const now = clock();
      const owner = await deps.sessions.verify(req.sessionToken);
      if (!owner.stepUpFresh) fail(Reason.ACCESS_DENIED, "approving a payment needs a fresh step-up");
      if (!UUID.test(req.paymentId)) fail(Reason.NOT_FOUND, "no such payment");
      const payment = await db.transaction(async (trx) => {
        const p = await store.payments.findPaymentById(trx, req.paymentId.toLowerCase(), true);
        if (!p || p.userId !== owner.userId) fail(Reason.NOT_FOUND, "no such payment");
        if (p.status === "declined") fail(Reason.NOT_FOUND, "the payment was declined");
        if (p.status !== "pending_step_up") return p;
        const approved = await store.payments.setPaymentStatus(trx, p.id, "approved", now);
        await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor: `user:${owner.userId}`, action: "payments.approve", outcome: "success", subject: p.id, at: now });
        return approved;
      });
      return { payment: paymentView(payment) };
    },

    async declinePayment(req, ctx) {
      const now = clock();
      const owner = await deps.sessions.verify(req.sessionToken);
      if (!UUID.test(req.paymentId)) fail(Reason.NOT_FOUND, "no such payment");
      const payment = await db.transaction(async (trx) => {
        // The row lock orders a decline against a concurrent approval: one of them decides.
        const p = await store.payments.findPaymentById(trx, req.paymentId.toLowerCase(), true);
        if (!p || p.userId !== owner.userId) fail(Reason.NOT_FOUND, "no such payment");
        if (p.status === "declined") return p;
        if (p.status !== "pending_step_up") fail(Reason.NOT_FOUND, "the payment is no longer waiting for approval");
        const declined = await store.payments.setPaymentStatus(trx, p.id, "declined", now);
        await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor: `user:${owner.userId}`, action: "payments.decline", outcome: "success", subject: p.id, at: now });
        return declined;
      });
      return { payment: paymentView(payment) };
    },

    async declineBudget(req, ctx) {
      const now = clock();
      const owner = await deps.sessions.verify(req.sessionToken);
      if (!UUID.test(req.agentPrincipalId)) fail(Reason.NOT_FOUND, "no such budget");
      const budget = await db.transaction(async (trx) => {
        const b = await store.budgets.findBudgetByAgent(trx, req.agentPrincipalId.toLowerCase(), true);
        if (!b || b.userId !== owner.userId) fail(Reason.NOT_FOUND, "no such budget");
        if (b.status === "declined") return b;
        if (b.status !== "draft") fail(Reason.NOT_FOUND, "the budget is no longer waiting for approval");
        // The owner may have funded the draft: what it holds goes back to the parent vault.
        await sweep(trx, b, "decline", now);
        const declined = await store.budgets.updateBudget(trx, b.id, { status: "declined" }, now);
        await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor: `user:${owner.userId}`, action: "agent.budget.decline", outcome: "success", subject: b.agentPrincipalId, at: now });
        return declined;
      });
      return { budget: budgetView(budget) };
    },

    async listPendingApprovals(req) {
      const owner = await deps.sessions.verify(req.sessionToken);
      if (req.limit > MAX_PENDING_PAGE) fail(Reason.INVALID_REQUEST, `limit must be 0 (everything) or 1 to ${MAX_PENDING_PAGE}`);
      // A cursor is bound to its list and to the user it was issued for (core/paging.ts signs it).
      const position = (cursor: string, list: "b" | "p") => {
        if (!cursor) return undefined;
        if (req.limit === 0) fail(Reason.INVALID_CURSOR, "a cursor needs a limit");
        const c = deps.cursors.decode(cursor);
        if (!c || c.l !== list || c.u !== owner.userId || typeof c.t !== "string" || typeof c.i !== "string" || !UUID.test(c.i)) fail(Reason.INVALID_CURSOR, "the cursor is not valid");
        return { at: c.t, id: c.i };
      };
      const page = (cursor: string, list: "b" | "p") => (req.limit === 0 ? undefined : { limit: req.limit + 1, after: position(cursor, list) });
      const [allBudgets, allPayments] = await Promise.all([
        store.budgets.listDraftBudgets(db, owner.userId, page(req.budgetsCursor, "b")),
        store.payments.listPendingPayments(db, owner.userId, page(req.paymentsCursor, "p")),
      ]);
      const next = <T extends { key: { at: string; id: string } }>(rows: T[], list: "b" | "p") => {
        if (req.limit === 0 || rows.length <= req.limit) return { rows, cursor: "" };
        const kept = rows.slice(0, req.limit);
        const last = kept.at(-1)!.key;
        return { rows: kept, cursor: deps.cursors.encode({ l: list, u: owner.userId, t: last.at, i: last.id }) };
      };
      const { rows: budgets, cursor: nextBudgetsCursor } = next(allBudgets, "b");
      const { rows: payments, cursor: nextPaymentsCursor } = next(allPayments, "p");
      // Review pages show limits in the vault's currency (a child vault inherits its parent's).
      const currencies = new Map<string, string>();
      for (const b of budgets) {
        if (!currencies.has(b.vaultId)) currencies.set(b.vaultId, (await store.vaults.findVault(db, b.vaultId))?.currency ?? "");
      }
      return {
        draftBudgets: budgets.map((b) => budgetView(b, currencies.get(b.vaultId))),
        pendingPayments: payments.map(paymentView),
        nextBudgetsCursor,
        nextPaymentsCursor,
      };
    },

    async getBalance(req, ctx) {
      const claims = await claimsFor(req.accessToken, SCOPES.accountsRead);
      const g = usable(await store.grants.findGrant(db, claims.jti));
      const vault = await store.vaults.findVault(db, g.vaultId);
      if (!vault || vault.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
      // A read is withheld when its audit row cannot be written.
      await auditOutside(ctx, actorOf(g), "accounts.balance", "success", "", vault.id);
      return { vaultId: vault.id, balanceCents: BigInt(vault.balanceCents), currency: vault.currency };
    },

    async listGrantAudit(req, ctx) {
      const claims = await claimsFor(req.accessToken, SCOPES.auditStream);
      const g = usable(await store.grants.findGrant(db, claims.jti));
      const limit = req.limit === 0 ? 100 : req.limit;
      if (limit > MAX_AUDIT_LIMIT) fail(Reason.INVALID_REQUEST, `limit must be 1 to ${MAX_AUDIT_LIMIT}`);
      const actor = actorOf(g);
      // Feed positions (core/paging.ts): a watermark, or a record_id of this actor's feed.
      let after = await auditSince(audit, req.since, actor);
      // A cursor is bound to the actor it was issued for.
      if (req.cursor) after = auditCursor(deps.cursors, req.cursor, { w: actor });
      const rows = await audit.list({ after, limit: limit + 1, actor });
      const page = rows.slice(0, limit);
      const last = page.at(-1)?.position;
      // A read is withheld when its audit row cannot be written. Its actor is not the
      // stream's own, so polling the stream never feeds it (each poll would list the last).
      await auditOutside(ctx, `${actor}:audit-reader`, "audit.list", "success", "", g.id);
      return {
        records: page.map(({ row: r }) => ({
          recordId: String(r.seq),
          action: r.action,
          outcome: r.outcome,
          reason: r.reason,
          subject: r.subject,
          createdAt: timestampFromDate(r.createdAt),
        })),
        nextCursor: rows.length > limit && last ? deps.cursors.encode({ a: last.seq, x: last.xid, w: actor }) : "",
        watermark: formatWatermark(last ?? after),
      };
    },

    async fundVault(req, ctx) {
      const amountCents = Number(req.amountCents);
      if (req.amountCents < 1n || req.amountCents > BigInt(MAX_AMOUNT)) fail(Reason.INVALID_REQUEST, `amount_cents must be an integer from 1 to ${MAX_AMOUNT}`);
      const vault = await db.transaction(async (trx) => {
        const v = await store.vaults.findVault(trx, req.vaultId, true);
        if (!v) fail(Reason.NOT_FOUND, "no such vault");
        if (v.balanceCents + amountCents > MAX_AMOUNT) fail(Reason.INVALID_REQUEST, "the balance would exceed 2^53-1 cents");
        const funded = await store.vaults.fundVault(trx, v, amountCents, { id: randomUUID(), kind: "vault.fund", reference: `vault:${v.id}`, at: clock() });
        await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor: "admin", action: "vault.fund", outcome: "success", subject: v.id, at: clock() });
        return funded;
      });
      return { vaultId: vault.id, balanceCents: BigInt(vault.balanceCents), currency: vault.currency };
    },

    async fundBudget(req, ctx) {
      const caller = await budgetCaller(req.accessToken, req.sessionToken, "funding a budget");
      const amountCents = checkFundInput(req.amountCents, req.idempotencyKey);
      if (!UUID.test(req.vaultId)) fail(Reason.NOT_FOUND, "no such budget");
      const vaultId = req.vaultId.toLowerCase();
      // The key's ledger transaction: the same key on the same budget names the same movement.
      const transferId = derivedId("budget.fund", vaultId, req.idempotencyKey);
      const seen: { actor?: string } = {};
      try {
        const out = await db.transaction(async (trx) => {
          const now = clock();
          const { budget: b, actor, agent } = await actingOn(trx, caller, vaultId, seen);
          const current = (await store.vaults.findVault(trx, b.vaultId))!;
          // A replay answers what the key did, whatever the budget became since.
          const prior = await store.vaults.findTransfer(trx, transferId, { vaultId: b.vaultId, currency: current.currency });
          if (prior) {
            if (prior.kind !== "budget.fund" || prior.amountCents !== amountCents) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with another amount");
            return { b, vault: current, replayed: true };
          }
          if (b.status === "closed") fail(Reason.ACCESS_DENIED, "the budget is closed");
          if (b.status === "declined") fail(Reason.ACCESS_DENIED, "the vault owner declined this budget");
          // Money goes into a budget an agent made without a step-up only once its owner looked at it.
          if (b.status === "draft" && agent) fail(Reason.ACCESS_DENIED, "the budget is a draft awaiting its owner's approval: only the owner can fund it");
          const { parent, child } = await lockBudgetVaults(trx, b);
          if (parent.balanceCents < amountCents) fail(Reason.INSUFFICIENT_FUNDS, "the parent vault's balance is below the amount");
          if (child.balanceCents + amountCents > MAX_AMOUNT) fail(Reason.INVALID_REQUEST, "the budget's balance would exceed 2^53-1 cents");
          const moved = await store.vaults.moveBetweenVaults(trx, parent, child, amountCents, { id: transferId, kind: "budget.fund", reference: `budget:${b.vaultId}`, at: now });
          // Impossible while the budget is locked (findTransfer saw no such movement).
          if (!moved.moved) throw new Error(`budget funding ${transferId} was already in the ledger`);
          await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor, action: "agent.budget.fund", outcome: "success", subject: b.vaultId, at: now });
          return { b, vault: moved.to, replayed: false };
        });
        return {
          transferId,
          vaultId: out.b.vaultId,
          parentVaultId: out.b.parentVaultId,
          amountCents: BigInt(amountCents),
          currency: out.vault.currency,
          balanceCents: BigInt(out.vault.balanceCents),
          replayed: out.replayed,
        };
      } catch (err) {
        await auditRefusal(ctx, seen.actor, "agent.budget.fund", vaultId, err);
        throw err;
      }
    },

    async closeBudget(req, ctx) {
      const caller = await budgetCaller(req.accessToken, req.sessionToken, "closing a budget");
      if (!UUID.test(req.vaultId)) fail(Reason.NOT_FOUND, "no such budget");
      const vaultId = req.vaultId.toLowerCase();
      const seen: { actor?: string } = {};
      try {
        const out = await db.transaction(async (trx) => {
          const now = clock();
          const { budget: b, actor } = await actingOn(trx, caller, vaultId, seen);
          if (b.status === "closed") {
            const v = (await store.vaults.findVault(trx, b.vaultId))!;
            return { b, currency: v.currency, sweptCents: 0, transferId: "", revoked: 0, already: true };
          }
          // The budgets its agent made close with it, all levels down (top-down, locked).
          const below = (await store.budgets.lockOpenDescendants(trx, b.userId, b.vaultId)).filter((d) => d.status !== "closed");
          const closing = [b, ...below];
          const vaultIds = closing.map((x) => x.vaultId);
          // Grants first (a payment locks its grant, then its vault): from here on none of
          // them pays, and none can be refreshed into a new one.
          const revoked = await store.grants.revokeVaultGrants(trx, b.userId, vaultIds, now, "budget_closed");
          const vaults = await store.vaults.lockVaults(trx, [b.parentVaultId, ...vaultIds]);
          for (const x of closing) {
            const v = vaults.get(x.vaultId);
            if (!v || v.ownerUserId !== b.userId) fail(Reason.NOT_FOUND, "no such budget");
          }
          const parent = vaults.get(b.parentVaultId);
          if (!parent || parent.ownerUserId !== b.userId) fail(Reason.NOT_FOUND, "no such budget");
          // A payment waiting for the owner (or approved and not yet repeated) never completes.
          await store.payments.declineOpenPayments(trx, vaultIds, now);
          // The policies are frozen: a grant issued on these vaults later still pays nothing.
          await store.budgets.closePolicies(trx, vaultIds, now);
          let closed = b;
          for (const x of closing) {
            const updated = await store.budgets.updateBudget(trx, x.id, { status: "closed", closedAt: now }, now);
            if (x.id === b.id) closed = updated;
            await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor, action: "agent.budget.close", outcome: "success", subject: x.vaultId, at: now });
          }
          // Deepest first, each budget's money goes up to its parent, so what the closed
          // budget's own budgets held reaches the vault the closed budget was made under.
          let swept = { sweptCents: 0, transferId: "" };
          if (!req.keepFunds) {
            for (const x of [...closing].reverse()) {
              const moved = await sweepInto(trx, x, vaults, "close", now);
              if (x.id === b.id) swept = moved;
            }
          }
          return { b: closed, ...swept, currency: vaults.get(b.vaultId)!.currency, revoked, already: false };
        });
        return {
          vaultId: out.b.vaultId,
          parentVaultId: out.b.parentVaultId,
          status: BudgetStatus.CLOSED,
          sweptCents: BigInt(out.sweptCents),
          currency: out.currency,
          transferId: out.transferId,
          revokedGrants: out.revoked,
          alreadyClosed: out.already,
          closedAt: out.b.closedAt ? timestampFromDate(out.b.closedAt) : undefined,
        };
      } catch (err) {
        await auditRefusal(ctx, seen.actor, "agent.budget.close", vaultId, err);
        throw err;
      }
    },

    async sweepBudget(req, ctx) {
      const caller = await budgetCaller(req.accessToken, req.sessionToken, "sweeping a budget");
      if (!UUID.test(req.vaultId)) fail(Reason.NOT_FOUND, "no such budget");
      const vaultId = req.vaultId.toLowerCase();
      const seen: { actor?: string } = {};
      try {
        const out = await db.transaction(async (trx) => {
          const now = clock();
          const { budget: b, actor } = await actingOn(trx, caller, vaultId, seen);
          if (b.status !== "closed") fail(Reason.ACCESS_DENIED, "the budget is not closed: closing it (without keep_funds) moves its money back");
          // What the budgets closed with it kept comes up too, deepest first (as a close sweeps).
          // Closing reached them all; only closed budgets' money is ever swept.
          const below = (await store.budgets.lockDescendants(trx, b.userId, b.vaultId)).filter((d) => d.status === "closed");
          const sweeping = [b, ...below];
          const vaults = await store.vaults.lockVaults(trx, [b.parentVaultId, ...sweeping.map((x) => x.vaultId)]);
          for (const id of [b.parentVaultId, ...sweeping.map((x) => x.vaultId)]) {
            const v = vaults.get(id);
            if (!v || v.ownerUserId !== b.userId) fail(Reason.NOT_FOUND, "no such budget");
          }
          let own = { sweptCents: 0, transferId: "" };
          for (const x of [...sweeping].reverse()) {
            const moved = await sweepInto(trx, x, vaults, "kept", now);
            if (moved.sweptCents > 0 || x.id === b.id) {
              await audit.append(trx, { requestId: ctx.values.get(kRequestId), actor, action: "agent.budget.sweep", outcome: "success", reason: moved.sweptCents > 0 ? "" : "nothing_to_sweep", subject: x.vaultId, at: now });
            }
            if (x.id === b.id) own = moved;
          }
          return { b, ...own, currency: vaults.get(b.vaultId)!.currency };
        });
        return {
          vaultId: out.b.vaultId,
          parentVaultId: out.b.parentVaultId,
          sweptCents: BigInt(out.sweptCents),
          currency: out.currency,
          transferId: out.transferId,
          nothingToSweep: out.sweptCents === 0,
        };
      } catch (err) {
        await auditRefusal(ctx, seen.actor, "agent.budget.sweep", vaultId, err);
        throw err;
      }
    },

    async listStrandedFunds() {
      const rows = await store.budgets.listStranded(db, MAX_STRANDED + 1);
      return {
        vaults: rows.slice(0, MAX_STRANDED).map((r) => ({
          vaultId: r.budget.vaultId,
          parentVaultId: r.budget.parentVaultId,
          userId: r.budget.userId,
          balanceCents: BigInt(r.balanceCents),
          currency: r.currency,
          closedAt: r.budget.closedAt ? timestampFromDate(r.budget.closedAt) : undefined,
        })),
        more: rows.length > MAX_STRANDED,
      };
    },

    getMoneyView: (req) => getMoneyView(deps, req),

    async reapProvisioning() {
      return { cleaned: await reap() };
    },

    reap,
  };
}

function fenced(): never {
  return fail(Reason.VAULT_CONTENTION, "this provisioning attempt was taken over by a newer one; retry with the same idempotency_key");
}

function optNumber(v: bigint | undefined): number | undefined {
  if (v === undefined) return undefined;
  // Out-of-range values stay out of range so validation names the field.
  return v > BigInt(Number.MAX_SAFE_INTEGER) || v < 0n ? -1 : Number(v);
}

function paymentInput(p: { counterparty?: { address: string; chain: string; token: string }; amountCents: bigint; currency: string; idempotencyKey: string } | undefined) {
  if (!p || !p.counterparty) return fail(Reason.INVALID_REQUEST, "counterparty is required");
  return checkPaymentInput({
    address: p.counterparty.address,
    chain: p.counterparty.chain,
    token: p.counterparty.token,
    amountCents: optNumber(p.amountCents)!,
    currency: p.currency,
    idempotencyKey: p.idempotencyKey,
  });
}
