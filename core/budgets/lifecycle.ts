import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  BudgetStatus,
  type ActivateBudgetRequest,
  type ActivateBudgetResponseSchema,
  type CloseBudgetRequest,
  type CloseBudgetResponseSchema,
  type CreateBudgetRequest,
  type CreateBudgetResponseSchema,
  type DeclineBudgetRequest,
  type DeclineBudgetResponseSchema,
} from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import type {
  ListStrandedFundsRequest,
  ListStrandedFundsResponseSchema,
  SweepBudgetRequest,
  SweepBudgetResponseSchema,
} from "../../gen/vaultgate/budgets/v1/funds_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { callFacts } from "../context.js";
import { leftWhileWaiting, throwIfAbandoned } from "../deadlines.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import { sha256Hex } from "../../lib/crypto.js";
import { actorOf, auditOutside, budgetCaller, claimsFor, SCOPES, usable, withBudget, type ActingDeps } from "./caller.js";
import { sweepInto } from "./funding.js";
import { endBudgetTree, type EndingDeps } from "./closing.js";
import { canonicalJson } from "./ids.js";
import type { BudgetRecord } from "./records.js";
import { finishSaga, runSteps, startSaga, type SagaDeps } from "./saga.js";
import type { BudgetsRowStore, StrandedKey } from "./stores/budgets.js";
import type { CursorCodec } from "../paging.js";
import { UUID } from "../../lib/uuid.js";
import type { VaultsStore } from "./stores/vaults.js";
import type { BudgetGrantsStore } from "../grants/stores/budget-grants.js";
import { declining, ownerDecision, type OwnedRecord, type OwnerDecisionBase } from "./owner-decision.js";
import { checkBudgetInput, checkWindowOpen, optNumber } from "./validation.js";
import { budgetView } from "./views.js";

export interface CreateBudgetDeps extends SagaDeps, ActingDeps {
  rateLimits: RateLimitStore;
  /** Provisioning starts per parent vault per minute. */
  provisioningLimitPerMinute: number;
}

export interface OwnerDecisionDeps extends OwnerDecisionBase {
  budgets: BudgetsRowStore;
  vaults: VaultsStore;
  grants: BudgetGrantsStore;
}

/** The most stranded vaults a ListStrandedFunds page names, and the default. */
const MAX_STRANDED = 100;

/** BudgetsService.CreateBudget: an agent makes a budget under its grant's vault (the saga in saga.ts). */
export async function createBudget(
  deps: CreateBudgetDeps,
  req: CreateBudgetRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof CreateBudgetResponseSchema>> {
  const now = deps.clock();
  const claims = await claimsFor(deps, req.accessToken, SCOPES.budgetCreate);
  // Replays and rate limits answer only a live grant; each saga transaction re-reads it under lock.
  const g = usable(deps, await deps.grants.findGrant(deps.db, claims.jti));
  const params = checkBudgetInput({
    purpose: req.purpose,
    displayName: req.displayName,
    amountCapCentsPerTx: optNumber(req.amountCapCentsPerTx),
    amountCapCentsPerDay: optNumber(req.amountCapCentsPerDay),
    amountCapCentsLifetime: optNumber(req.amountCapCentsLifetime),
    stepUpAmountCents: optNumber(req.stepUpAmountCents),
    chainAllowlist: req.chainAllowlist,
    timeWindowEnd: req.timeWindowEnd ? timestampDate(req.timeWindowEnd) : undefined,
    idempotencyKey: req.idempotencyKey,
  });
  const hash = sha256Hex(canonicalJson(params));
  const actor = actorOf(g);

  // A replay answers with the same ids and the budget's current status.
  const existing = await deps.budgets.findBudget(deps.db, g.vaultId, req.idempotencyKey);
  const replay = existing && replayOf(existing, hash);
  if (replay) return replay;

  checkWindowOpen(params, now);
  // Only starts that pass validation count, replays and callers who left while waiting do not.
  throwIfAbandoned(ctx.signal, "before the budget's provisioning began");
  const limit = await deps.rateLimits.hit(`budget-provisioning:${g.vaultId}`, deps.provisioningLimitPerMinute, 60, now);
  if (!limit.allowed) {
    await auditOutside(deps, ctx, actor, "agent.budget.create", "failure", "rate_limited", g.vaultId);
    fail(Reason.RATE_LIMITED, "too many budget provisioning starts for this vault", { retryAfterSeconds: 60 });
  }

  let budget: BudgetRecord;
  try {
    budget = await startSaga(deps, ctx.signal, g.id, existing, params, hash, req.idempotencyKey, now);
    // Another retry of the key ran its saga meanwhile: this one answers what it became.
    if (budget.status !== "provisioning")
      return replayOf(budget, hash) ?? fail(Reason.VAULT_CONTENTION, "this budget is being provisioned; retry with backoff");
  } catch (err) {
    if (leftWhileWaiting(ctx.signal, err)) throw err;
    const detail = errorDetailOf(err);
    const reason = detail?.reason;
    const limit = detail?.limitName ? `:${detail.limitName}` : "";
    await auditOutside(deps, ctx, actor, "agent.budget.create", "failure", reason ? `${Reason[reason].toLowerCase()}${limit}` : "internal", g.vaultId);
    throw err;
  }
  const steps = await runSteps(deps, ctx, actor, budget);
  return { budget: budgetView(await finishSaga(deps, ctx, actor, budget, steps, g.id)) };
}

/** What a key that already names a budget answers; undefined when its failed saga may run again. */
function replayOf(existing: BudgetRecord, hash: string): { budget: ReturnType<typeof budgetView> } | undefined {
  if (existing.paramsHash !== hash) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with other parameters");
  if (existing.status === "draft" || existing.status === "active") return { budget: budgetView(existing) };
  // A declined budget is not reprovisioned under its key; nor is a closed one: closing is final.
  if (existing.status === "declined") fail(Reason.ACCESS_DENIED, "the vault owner declined this budget");
  if (existing.status === "closed") fail(Reason.ACCESS_DENIED, "this budget was closed");
  if (existing.status === "provisioning") fail(Reason.VAULT_CONTENTION, "this budget is being provisioned; retry with backoff");
  return undefined;
}

/** A draft budget as the owner names it: by its agent principal. */
const ownedBudget = (deps: OwnerDecisionDeps, rawId: string): OwnedRecord<BudgetRecord> => ({
  rawId,
  noun: "budget",
  find: (trx, id) => deps.budgets.findBudgetByAgent(trx, id, true),
  subject: (b) => b.agentPrincipalId,
});

/** BudgetsService.ActivateBudget: the owner, freshly stepped up, activates a draft. */
export async function activateBudget(
  deps: OwnerDecisionDeps,
  req: ActivateBudgetRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ActivateBudgetResponseSchema>> {
  const budget = await ownerDecision(deps, ctx, req.sessionToken, ownedBudget(deps, req.agentPrincipalId), {
    stepUp: "activating a budget needs a fresh step-up",
    state: (b) => {
      if (b.status === "declined") fail(Reason.NOT_FOUND, "the budget was declined");
      if (b.status === "closed") fail(Reason.NOT_FOUND, "the budget was closed");
      return b.status === "active" ? "done" : "decide";
    },
    decide: async (trx, b, now) => {
      // The grant that asked for it, locked after the budget: a revocation committed first is seen.
      // Its drafts end with it (endings.ts); none is activated for an agent that lost its access.
      if ((await deps.grants.findGrant(trx, b.grantId, true))?.state === "revoked")
        fail(Reason.NOT_FOUND, "the agent that asked for this budget was revoked; the draft is declined");
      await deps.budgets.activatePolicy(trx, b.vaultId, now);
      return deps.budgets.updateBudget(trx, b.id, { status: "active", policyVersion: 1 }, now);
    },
    action: "agent.budget.activate",
  });
  return { budget: budgetView(budget) };
}

/** BudgetsService.DeclineBudget: the owner refuses a draft; what it holds goes back to the parent vault, and what its agent made below closes. */
export async function declineBudget(
  deps: OwnerDecisionDeps & EndingDeps,
  req: DeclineBudgetRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof DeclineBudgetResponseSchema>> {
  const budget = await ownerDecision(deps, ctx, req.sessionToken, ownedBudget(deps, req.agentPrincipalId), {
    state: declining("draft", "budget"),
    decide: async (trx, b, now) => {
      // What the owner funded, and every budget its agent made below it, end with it.
      const out = await endBudgetTree(deps, trx, ctx, b, { status: "declined", actor: `user:${b.userId}`, sweep: true, now });
      return out.ended;
    },
    action: "agent.budget.decline",
  });
  return { budget: budgetView(budget) };
}

/** BudgetsService.CloseBudget: the budget and every budget below it close; their grants are revoked. */
export async function closeBudget(deps: EndingDeps, req: CloseBudgetRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof CloseBudgetResponseSchema>> {
  const caller = await budgetCaller(deps, req.accessToken, req.sessionToken, "closing a budget");
  const out = await withBudget(deps, ctx, caller, req.vaultId, "agent.budget.close", async (trx, { budget: b, actor, now }) => {
    if (b.status === "closed") {
      const v = (await deps.vaults.findVault(trx, b.vaultId))!;
      return { b, currency: v.currency, sweptCents: 0, transferId: "", revoked: 0, already: true };
    }
    // The budgets its agent made close with it, all levels down (endBudgetTree).
    const out = await endBudgetTree(deps, trx, ctx, b, { status: "closed", actor, sweep: !req.keepFunds, now });
    return { b: out.ended, ...out.swept, currency: out.currency, revoked: out.revoked, already: false };
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
}

/** BudgetsService.SweepBudget: what a closed budget (and those closed with it) kept goes up to the parent. */
export async function sweepBudget(deps: EndingDeps, req: SweepBudgetRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof SweepBudgetResponseSchema>> {
  const caller = await budgetCaller(deps, req.accessToken, req.sessionToken, "sweeping a budget");
  const out = await withBudget(deps, ctx, caller, req.vaultId, "agent.budget.sweep", async (trx, { budget: b, actor, now }) => {
    if (b.status !== "closed") fail(Reason.ACCESS_DENIED, "the budget is not closed: closing it (without keep_funds) moves its money back");
    // What the budgets closed with it kept comes up too, deepest first (as a close sweeps).
    // Closing reached them all; only closed budgets' money is ever swept.
    const below = (await deps.budgets.lockDescendants(trx, b.userId, b.vaultId)).filter((d) => d.status === "closed");
    const sweeping = [b, ...below];
    const vaults = await deps.vaults.lockVaults(trx, [b.parentVaultId, ...sweeping.map((x) => x.vaultId)]);
    for (const id of [b.parentVaultId, ...sweeping.map((x) => x.vaultId)]) {
      const v = vaults.get(id);
      if (!v || v.ownerUserId !== b.userId) fail(Reason.NOT_FOUND, "no such budget");
    }
    let own = { sweptCents: 0, transferId: "" };
    for (const x of [...sweeping].reverse()) {
      const moved = await sweepInto(deps, trx, x, vaults, "kept", now);
      if (moved.sweptCents > 0 || x.id === b.id) {
        const reason = moved.sweptCents > 0 ? "" : "nothing_to_sweep";
        await deps.audit.append(trx, {
          ...callFacts(ctx),
          actor,
          action: "agent.budget.sweep",
          outcome: "success",
          reason,
          subject: x.vaultId,
          at: now,
        });
      }
      if (x.id === b.id) own = moved;
    }
    // The owner asked for the money up: a refund arriving later goes up too.
    await deps.budgets.markSweptUp(trx, sweeping, now);
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
}

/** BudgetsService.ListStrandedFunds: a page of closed budgets whose vault still holds money. */
export async function listStrandedFunds(
  deps: Pick<OwnerDecisionDeps, "db" | "budgets"> & { cursors: CursorCodec },
  req: ListStrandedFundsRequest,
): Promise<MessageInitShape<typeof ListStrandedFundsResponseSchema>> {
  if (req.limit > MAX_STRANDED) fail(Reason.INVALID_REQUEST, `limit must be 0 or 1 to ${MAX_STRANDED}`);
  const limit = req.limit || MAX_STRANDED;
  // A cursor is bound to this list: one of another list, or altered, is refused.
  let after: StrandedKey | undefined;
  if (req.cursor) {
    const c = deps.cursors.decode(req.cursor);
    if (c?.l !== "stranded" || typeof c.t !== "string" || typeof c.v !== "string" || !UUID.test(c.v))
      fail(Reason.INVALID_CURSOR, "cursor is malformed or not a next_cursor of this list");
    after = { at: c.t, vaultId: c.v };
  }
  const rows = await deps.budgets.listStranded(deps.db, limit + 1, after);
  const page = rows.slice(0, limit);
  const last = rows.length > limit ? page.at(-1)!.key : undefined;
  return {
    vaults: page.map((r) => ({
      vaultId: r.budget.vaultId,
      parentVaultId: r.budget.parentVaultId,
      userId: r.budget.userId,
      balanceCents: BigInt(r.balanceCents),
      currency: r.currency,
      closedAt: r.budget.closedAt ? timestampFromDate(r.budget.closedAt) : undefined,
    })),
    more: last !== undefined,
    nextCursor: last ? deps.cursors.encode({ l: "stranded", t: last.at, v: last.vaultId }) : "",
  };
}
