import type { AgentScope } from "../../lib/vocabulary.js";
import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { AgentTokenClaims } from "../grants/access-token.js";
import type { AgentGrant, BudgetGrantsStore } from "../grants/stores/budget-grants.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { assertGrantUsable } from "../grants/usable.js";
import { UUID } from "../../lib/uuid.js";
import { hasScope } from "./policy.js";
import type { BudgetRecord } from "./records.js";
import type { BudgetsRowStore } from "./stores/budgets.js";

export const SCOPES = {
  budgetCreate: "agent:budget:create",
  paymentsInitiate: "payments:initiate",
  paymentsSimulate: "payments:simulate",
  accountsRead: "accounts:read",
  auditStream: "audit:stream",
} as const satisfies Record<string, AgentScope>;

export interface TokenDeps {
  /** Verifies agent access tokens (signature, issuer, audience, type, lifetime); grant state is read here. */
  verifier: { verify(token: string): Promise<AgentTokenClaims | undefined> };
}
export interface ClockDeps {
  clock: () => Date;
}
export interface AuditDeps extends ClockDeps {
  db: Db;
  audit: AuditStore;
}
/** What resolving the caller of FundBudget, CloseBudget or SweepBudget and its budget needs. */
export interface ActingDeps extends AuditDeps, TokenDeps {
  sessions: SessionVerifier;
  grants: BudgetGrantsStore;
  budgets: BudgetsRowStore;
}

export const actorOf = (g: AgentGrant) => `agent:${g.agentPrincipalId}`;

/**
 * Verifies the caller's access token (ES256, iss, aud, typ, lifetime, skew) and that it
 * carries `scope` (or any one of a list). The grant it names is not trusted yet: each RPC
 * reads it afresh with `usable`, inside the transaction that acts on it where there is one.
 */
export async function claimsFor(deps: TokenDeps, accessToken: string, scope: string | readonly string[]): Promise<AgentTokenClaims> {
  const claims = accessToken ? await deps.verifier.verify(accessToken) : undefined;
  if (!claims) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
  const anyOf = typeof scope === "string" ? [scope] : scope;
  const held = claims.scope.split(" ");
  if (!anyOf.some((s) => hasScope(held, s))) fail(Reason.INSUFFICIENT_SCOPE, `the grant lacks the ${anyOf.join(" or ")} scope`);
  return claims;
}

/** The grant as read from the database, refused unless the one grant rule says it may act. */
export function usable(deps: ClockDeps, g: AgentGrant | undefined): AgentGrant {
  assertGrantUsable(g, deps.clock());
  return g;
}

/** The calling grant stopped being usable while its saga ran (revoked, superseded, user inactive). */
export class GrantGone extends Error {}

/** usable(), for a grant re-read in a later step of a saga: a refusal there must unwind the saga first. */
export function stillUsable(deps: ClockDeps, g: AgentGrant | undefined): AgentGrant {
  try {
    return usable(deps, g);
  } catch {
    throw new GrantGone();
  }
}

export async function auditOutside(
  deps: AuditDeps,
  ctx: HandlerContext,
  actor: string,
  action: string,
  outcome: "success" | "failure",
  reason: string,
  subject: string,
) {
  try {
    await deps.audit.append(deps.db, { ...callFacts(ctx), actor, action, outcome, reason, subject, at: deps.clock() });
  } catch (err) {
    fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
  }
}

/** A refusal made once the caller was known is audited (the token's own refusals are not: there is no actor). */
export async function auditRefusal(
  deps: AuditDeps,
  ctx: HandlerContext,
  actor: string | undefined,
  action: string,
  subject: string,
  err: unknown,
): Promise<void> {
  const reason = errorDetailOf(err)?.reason;
  if (!actor || reason === undefined || reason === Reason.INVALID_TOKEN || reason === Reason.AUDIT_UNAVAILABLE) return;
  await auditOutside(deps, ctx, actor, action, "failure", Reason[reason].toLowerCase(), subject);
}

/** Who calls FundBudget or CloseBudget: an agent (its grant not yet read) or the signed-in owner. */
export type BudgetCaller = { kind: "agent"; grantId: string } | { kind: "owner"; userId: string };

/**
 * FundBudget's and CloseBudget's caller, before any transaction: exactly one of an
 * agent's access token (verified, with agent:budget:create; its grant is read later,
 * inside the acting transaction) and the owner's web session (with a fresh step-up).
 */
export async function budgetCaller(
  deps: TokenDeps & { sessions: SessionVerifier },
  accessToken: string,
  sessionToken: string,
  what: string,
): Promise<BudgetCaller> {
  if (accessToken && sessionToken) fail(Reason.INVALID_REQUEST, "set exactly one of access_token and session_token");
  if (sessionToken) {
    const owner = await deps.sessions.verify(sessionToken);
    if (!owner.stepUpFresh) fail(Reason.ACCESS_DENIED, `${what} needs a fresh step-up`);
    return { kind: "owner", userId: owner.userId };
  }
  const claims = await claimsFor(deps, accessToken, SCOPES.budgetCreate);
  return { kind: "agent", grantId: claims.jti };
}

/**
 * The budget of `vaultId`, locked, and the caller: an agent acts only on budgets under its
 * grant's vault and user, the owner on their own; anything else is "no such budget". The
 * grant is read before any lock (a dead one is refused early) and again under lock after the budget.
 */
async function actingOn(deps: ActingDeps, trx: Knex.Transaction, caller: BudgetCaller, vaultId: string, seen: { actor?: string }) {
  let userId: string;
  let grantVaultId: string | undefined;
  if (caller.kind === "agent") {
    const g = usable(deps, await deps.grants.findGrant(trx, caller.grantId));
    seen.actor = actorOf(g);
    userId = g.userId;
    grantVaultId = g.vaultId;
  } else {
    seen.actor = `user:${caller.userId}`;
    userId = caller.userId;
  }
  const budget = await deps.budgets.findBudgetByVault(trx, vaultId, true);
  if (!budget || budget.userId !== userId) fail(Reason.NOT_FOUND, "no such budget");
  if (grantVaultId !== undefined && budget.parentVaultId !== grantVaultId) {
    fail(Reason.GRANT_REQUIRED, "the grant's vault is not this budget's parent vault: fund and close a budget with a grant on the vault it was created under");
  }
  if (caller.kind === "agent") usable(deps, await deps.grants.findGrant(trx, caller.grantId, true));
  return { budget, actor: seen.actor, agent: caller.kind === "agent" };
}

export interface Acting {
  budget: BudgetRecord;
  actor: string;
  /** True when an agent (not the owner) acts. */
  agent: boolean;
  now: Date;
}

/**
 * The frame FundBudget, CloseBudget and SweepBudget share: the budget named by `rawVaultId`
 * (a malformed id names none) resolved for `caller` in one transaction that runs `work`;
 * a refusal made once the caller is known is audited as `action`.
 */
export async function withBudget<T>(
  deps: ActingDeps,
  ctx: HandlerContext,
  caller: BudgetCaller,
  rawVaultId: string,
  action: string,
  work: (trx: Knex.Transaction, acting: Acting) => Promise<T>,
): Promise<T> {
  if (!UUID.test(rawVaultId)) fail(Reason.NOT_FOUND, "no such budget");
  const vaultId = rawVaultId.toLowerCase();
  const seen: { actor?: string } = {};
  try {
    return await callerTransaction(deps.db, ctx.signal, `before ${action} began`, async (trx) => {
      const now = deps.clock();
      const acting = await actingOn(deps, trx, caller, vaultId, seen);
      return work(trx, { ...acting, now });
    });
  } catch (err) {
    await auditRefusal(deps, ctx, seen.actor, action, vaultId, err);
    throw err;
  }
}
