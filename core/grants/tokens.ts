import { randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type {
  IssueGrantRequest,
  RefreshGrantRequest,
  RevokeAllGrantsRequest,
  RevokeTokenRequest,
  SupersedeGrantRequest,
  VerifyAgentTokenRequest,
} from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callerTransaction } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { Keyring } from "../keys/keyring.js";
import { requireSigning } from "../keys/require-signing.js";
import { callFacts, kOperator } from "../context.js";
import { constantTimeEqual, sha256Hex } from "../../lib/crypto.js";
import { uuidv7 } from "../../lib/uuidv7.js";
import { UUID } from "../../lib/uuid.js";
import type { UsersStore } from "../identity/users-store.js";
import { parseScope } from "../../lib/scopes.js";
import { AGENT_SCOPES } from "../../lib/vocabulary.js";
import { isSubset } from "./scopes.js";
import { vaultOfResource } from "./authorize.js";
import { ACCESS_TOKEN_TTL_SECONDS, type AccessTokenVerifier } from "./access-token.js";
import { appendAudit, type AuditDeps } from "./audit.js";
import type { ClientDirectory } from "./client-auth.js";
import {
  deadBudgetVault,
  derivedRefresh,
  derivedRefreshToken,
  insertGrant,
  OPERATOR_CLIENT,
  firstRefresh,
  NO_REFRESH,
  randomRefresh,
  REFRESH_TTL_MS,
  signToken,
  type GrantAudience,
} from "./issue.js";
import { assertGrantUsable } from "./usable.js";
import type { ClientsStore } from "./stores/clients.js";
import type { AgentsStore } from "./stores/agents.js";
import type { GrantRecord, GrantsStore, GrantWithUser } from "./stores/grants.js";
import type { GrantVaultsStore } from "./stores/vaults.js";
import type { Outbox } from "../identity/outbox.js";
import type { InFlight } from "./stores/budget-grants.js";
import { revoking } from "./revoking.js";
import { quotedExcerpt } from "../../lib/text.js";

export interface AgentGrantDeps {
  verifier: AccessTokenVerifier;
  grants: GrantsStore;
  clock: () => Date;
}

export interface SigningDeps extends AuditDeps {
  db: Db;
  keyring: Keyring;
  audience: GrantAudience;
  grants: GrantsStore;
}

export interface RefreshGrantDeps extends SigningDeps {
  directory: ClientDirectory;
  /** Reuse detection revokes a lineage: what it left open is cancelled (revoking.ts). */
  inFlight: InFlight;
  vaults: GrantVaultsStore;
  users: UsersStore;
  /** How long a lost refresh response may be fetched again with the same token (about 30 s, configurable). */
  refreshGraceSeconds: number;
}

export interface IssueGrantDeps extends SigningDeps {
  clients: ClientsStore;
  agents: AgentsStore;
  vaults: GrantVaultsStore;
  users: UsersStore;
}

export interface RevokeTokenDeps extends AuditDeps {
  db: Db;
  directory: ClientDirectory;
  inFlight: InFlight;
  verifier: AccessTokenVerifier;
  grants: GrantsStore;
}

/**
 * Verifies an agent token and reads its grant afresh, on every call. With the caller's `signal`, a
 * caller who left while the read was queued is dropped; a revocation passes none, so it always goes on.
 */
async function activeGrant(deps: AgentGrantDeps, accessToken: string, signal?: AbortSignal): Promise<GrantWithUser> {
  const claims = accessToken ? await deps.verifier.verify(accessToken) : undefined;
  if (!claims) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
  const grant = await deps.grants.findGrantWithUser(claims.jti, signal);
  assertGrantUsable(grant, deps.clock());
  return grant;
}

/** GrantsService.VerifyAgentToken: the grant behind an agent token, if it may still act. */
export async function verifyAgentToken(deps: AgentGrantDeps, req: VerifyAgentTokenRequest, ctx: Pick<HandlerContext, "signal">) {
  const g = await activeGrant(deps, req.accessToken, ctx.signal);
  return {
    grant: {
      grantId: g.id,
      userId: g.userId,
      clientId: g.clientId ?? "",
      agentPrincipalId: g.agentPrincipalId,
      vaultId: g.vaultId,
      scopes: g.scopes,
      stepUp: g.stepUp,
      authTime: g.stepUp && g.authTime ? BigInt(Math.floor(g.authTime.getTime() / 1000)) : 0n,
    },
  };
}

/** GrantsService.SupersedeGrant: the agent trades its grant for one of the same or narrower scope. */
export async function supersedeGrant(deps: SigningDeps & AgentGrantDeps & { vaults: GrantVaultsStore }, req: SupersedeGrantRequest, ctx: HandlerContext) {
  const current = await activeGrant(deps, req.accessToken, ctx.signal);
  const wanted = parseScope(req.scope);
  if (!wanted) fail(Reason.INVALID_SCOPE, "scope is malformed");
  const scopes = wanted.length === 0 ? current.scopes : wanted;
  // A grant the agent issues itself never widens scope.
  if (!isSubset(scopes, current.scopes)) fail(Reason.INVALID_SCOPE, "scope may not exceed the current grant's");
  // A lineage issued without a refresh token (its client did not register one) stays without.
  const refresh = current.refreshHash === null ? NO_REFRESH : randomRefresh();
  // Before the old grant is superseded: a 503 then leaves the agent the grant it holds.
  await requireSigning(deps.keyring);
  const next = await callerTransaction(deps.db, ctx.signal, "before the grant was superseded", async (trx) => {
    // A closed or declined budget's vault gets no new grant; its budget row is locked first, as a refresh does.
    const dead = await deadBudgetVault(deps.vaults, trx, current.vaultId);
    if (dead) fail(Reason.INVALID_TARGET, dead);
    const row = await deps.grants.lockGrant(trx, current.id);
    // The one grant rule again under the lock: a revocation or expiry that came first is seen.
    const locked = row && { ...row, userActive: current.userActive };
    assertGrantUsable(locked, deps.clock());
    // The agent's own narrowing lasts: no later refresh gets back what it gave up.
    const g = await insertGrant(deps, trx, { ...locked, scopes, refreshScopes: null, lineageId: locked.lineageId, parentGrantId: locked.id }, refresh);
    await deps.grants.supersede(trx, locked.id, g.id, deps.clock(), false);
    await appendAudit(deps, trx, ctx, { actor: `agent:${locked.agentPrincipalId}`, action: "agent.grant.issue", subject: g.id });
    return g;
  });
  return { token: await signToken(deps, next, refresh.token) };
}

/** GrantsService.RevokeAllGrants: the agent pulls the kill switch on every grant of its user. */
export async function revokeAllGrants(
  deps: AgentGrantDeps & AuditDeps & { db: Db; inFlight: InFlight; notice?: { outbox: Pick<Outbox, "send">; users: UsersStore } },
  req: RevokeAllGrantsRequest,
  ctx: HandlerContext,
) {
  const g = await activeGrant(deps, req.accessToken);
  const revoked = await revoking(deps, ctx, `agent:${g.agentPrincipalId}`, async (trx, cancel) => {
    const n = await deps.grants.revokeAllOfUser(trx, g.userId, deps.clock(), "kill_switch");
    // Everything the agents had waiting for the owner stops with them (docs/reference/agent-tools.md).
    await cancel({ userId: g.userId }, deps.clock());
    await appendAudit(deps, trx, ctx, {
      actor: `agent:${g.agentPrincipalId}`,
      action: "killSwitch.all",
      subject: g.userId,
      reason: quotedExcerpt(req.reason, 200),
    });
    // The owner hears of it from us, whoever pulled it.
    const owner = deps.notice ? await deps.notice.users.findById(trx, g.userId) : undefined;
    if (owner)
      await deps.notice!.outbox.send(trx, {
        email: owner.email,
        subject: "Vaultgate: the kill switch was used",
        body: `An agent used the kill switch: every agent's access to your Vaultgate account was revoked (${n} grant${n === 1 ? "" : "s"}). Sign in to see what happened.`,
        at: deps.clock(),
      });
    return n;
  });
  return { revoked };
}

/** GrantsService.RefreshGrant: rotates a refresh token; reuse revokes the lineage, a lost response may be fetched again. */
export async function refreshGrant(deps: RefreshGrantDeps, req: RefreshGrantRequest, ctx: HandlerContext) {
  let clientId = "";
  if (req.clientId || req.clientSecret) {
    const client = await deps.directory.authenticate(ctx, req.clientId, req.clientSecret);
    // RFC 6749 5.2 unauthorized_client: the grant types a client registered are all it may use.
    if (!client.grantTypes.includes("refresh_token")) fail(Reason.UNAUTHORIZED_CLIENT, "this client did not register the refresh_token grant type");
    clientId = client.clientId;
  }
  // An operator-issued grant (no client) refreshes only with the operator credential.
  else if (!ctx.values.get(kOperator)) fail(Reason.INVALID_CLIENT, "client authentication failed");
  await requireSigning(deps.keyring);
  const actor = `client:${clientId || OPERATOR_CLIENT}`;
  const asked = refreshAsks(deps.audience, req);
  const hash = sha256Hex(req.refreshToken);
  const now = deps.clock();
  // The successor's token, if this refresh issues one (the fast path or under the lock).
  const refresh = derivedRefresh(req.refreshToken);
  // Only a refresh that asks for the lineage's whole scope and nothing else takes the fast path.
  if (req.refreshToken && asked.scopes.length === 0 && req.resources.length === 0) {
    const rotated = await deps.grants.rotateRefreshFast(
      {
        refreshHash: hash,
        clientId,
        issuedAfter: new Date(now.getTime() - REFRESH_TTL_MS),
        grantId: uuidv7(),
        newRefreshHash: refresh.hash,
        newRefreshSalt: refresh.salt,
        now,
        expiresAt: new Date(now.getTime() + ACCESS_TOKEN_TTL_SECONDS * 1000),
      },
      { ...callFacts(ctx), actor, action: "agent.grant.refresh" },
      ctx.signal,
    );
    if (rotated) return { token: await signToken(deps, rotated, refresh.token) };
  }
  const outcome = await deps.db.transaction(async (trx) => {
    // The row lock orders concurrent refreshes of one token, so the second gets the first's pair.
    // A closed or declined budget's vault gets no new grant: its budget row is locked before the
    // grant's (the budgets' lock order), the vault read from an unlocked look.
    const seen = req.refreshToken ? await deps.grants.findGrantByRefresh(trx, hash) : undefined;
    const dead = seen ? await deadBudgetVault(deps.vaults, trx, seen.vaultId) : undefined;
    const g = req.refreshToken ? await deps.grants.lockGrantByRefresh(trx, hash) : undefined;
    if (!g || (g.clientId ?? "") !== clientId) return { kind: "invalid" as const, why: "unknown refresh token" };
    // RFC 6749 5.2 invalid_grant: nothing is issued for an account that is no longer
    // active; the token is not used up, so it works again if the account is reactivated.
    const userActive = (await deps.users.findById(trx, g.userId))?.status === "active";
    if (g.state === "active" && !g.refreshUsedAt) {
      if (now.getTime() - g.issuedAt.getTime() > REFRESH_TTL_MS) return { kind: "invalid" as const, why: "expired refresh token" };
      if (!userActive) return { kind: "invalid" as const, why: "user inactive" };
      if (dead) return { kind: "invalid" as const, why: dead };
      const fit = refreshFit(g, asked);
      if (fit.kind !== "fit") return fit;
      const next = await insertGrant(deps, trx, { ...g, ...fit.grant, lineageId: g.lineageId, parentGrantId: g.id }, refresh);
      await deps.grants.supersede(trx, g.id, next.id, now, true);
      await appendAudit(deps, trx, ctx, { actor, action: "agent.grant.refresh", subject: next.id });
      return { kind: "issued" as const, grant: next, refreshToken: refresh.token };
    }
    if (g.refreshUsedAt && g.successorId && now.getTime() - g.refreshUsedAt.getTime() <= deps.refreshGraceSeconds * 1000) {
      const successor = await deps.grants.lockGrant(trx, g.successorId);
      // A retry of a lost response: hand back the same pair while nothing moved on.
      if (successor && successor.state === "active" && !successor.refreshUsedAt) {
        if (!userActive) return { kind: "invalid" as const, why: "user inactive" };
        const fit = refreshFit(g, asked);
        // A retry asks what the lost request asked; another request with a used token gets nothing (and revokes nothing),
        // answered as any used token is, whatever it asked for.
        if (fit.kind !== "fit" || !sameSet(fit.grant.scopes, successor.scopes))
          return { kind: "invalid" as const, why: "used refresh token presented with another scope or resource" };
        // The successor's token is derived from the token just presented and the
        // successor's salt; the database alone cannot produce it.
        const again = successor.refreshSalt ? derivedRefreshToken(req.refreshToken, successor.refreshSalt) : "";
        if (again && successor.refreshHash && constantTimeEqual(sha256Hex(again), successor.refreshHash)) {
          return { kind: "replayed" as const, grant: successor, refreshToken: again };
        }
        // A successor issued before refresh salts were stored cannot be reproduced.
        // Nothing was reused, so the lineage stays.
        return { kind: "invalid" as const, why: "successor token not reproducible" };
      }
    }
    // RFC 9700 4.14.2: a used refresh token presented again revokes the lineage (below).
    if (g.refreshUsedAt) return { kind: "reuse" as const, userId: g.userId, lineageId: g.lineageId };
    return { kind: "invalid" as const, why: "refresh token no longer valid" };
  });
  if (outcome.kind === "reuse") {
    // In a transaction of its own: the grant locked above sits mid-lineage, and every revocation
    // locks a lineage's rows in id order, so revoking while holding it could deadlock with another.
    await revoking(deps, ctx, actor, async (trx, cancel) => {
      await deps.grants.revokeLineage(trx, outcome.lineageId, now, "refresh_reuse");
      // What the lineage (perhaps a thief holding it) left waiting for the owner stops with it.
      await cancel({ userId: outcome.userId, lineageId: outcome.lineageId }, now);
      await appendAudit(deps, trx, ctx, {
        actor,
        action: "agent.grant.refresh_reuse",
        subject: outcome.lineageId,
        outcome: "failure",
        reason: "refresh_reuse",
      });
    });
    fail(Reason.INVALID_GRANT, "the refresh token is invalid, expired or revoked", {}, "refresh token reused");
  }
  if (outcome.kind === "invalid") fail(Reason.INVALID_GRANT, "the refresh token is invalid, expired or revoked", {}, outcome.why);
  if (outcome.kind === "scope") fail(Reason.INVALID_SCOPE, "scope may not include any scope the grant was not given");
  if (outcome.kind === "target") fail(Reason.INVALID_TARGET, "resource must be the MCP server URL or the grant's vault URN");
  return { token: await signToken(deps, outcome.grant, outcome.refreshToken, outcome.kind === "replayed" ? now : undefined) };
}

/** What a refresh asks for besides rotation: a scope (RFC 6749 6; [] = all it was given) and the vaults its resources name (RFC 8707). */
function refreshAsks(audience: GrantAudience, req: RefreshGrantRequest): { scopes: string[]; vaultIds: string[] } {
  const scopes = parseScope(req.scope);
  if (!scopes) fail(Reason.INVALID_SCOPE, "scope is malformed");
  const vaultIds: string[] = [];
  for (const resource of req.resources) {
    if (audience.mcpResources.has(resource)) continue;
    const id = vaultOfResource(audience.vaultUrnPrefix, resource);
    if (!id) fail(Reason.INVALID_TARGET, "resource must be the MCP server URL or the grant's vault URN");
    vaultIds.push(id);
  }
  return { scopes, vaultIds };
}

/**
 * The grant a refresh of `g` issues, within what its lineage was given (`refreshScopes`, else its
 * scopes), which the successor keeps for later refreshes; or why it is refused.
 */
function refreshFit(g: GrantRecord, asked: { scopes: string[]; vaultIds: string[] }) {
  const given = g.refreshScopes ?? g.scopes;
  if (!isSubset(asked.scopes, given)) return { kind: "scope" as const };
  if (asked.vaultIds.some((id) => id !== g.vaultId)) return { kind: "target" as const };
  const scopes = asked.scopes.length > 0 ? given.filter((x) => asked.scopes.includes(x)) : given;
  return { kind: "fit" as const, grant: { scopes, refreshScopes: sameSet(scopes, given) ? null : given } };
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  return isSubset(a, b) && isSubset(b, a);
}

/** GrantsService.IssueGrant: the operator issues a grant on a user's vault, with or without a client. */
export async function issueGrant(deps: IssueGrantDeps, req: IssueGrantRequest, ctx: HandlerContext) {
  if (!UUID.test(req.userId)) fail(Reason.INVALID_REQUEST, "user must be a UUID");
  if (!UUID.test(req.vaultId)) fail(Reason.INVALID_REQUEST, "vault must be a UUID");
  const scopes = [...new Set(req.scopes)];
  if (scopes.length === 0 || !isSubset(scopes, AGENT_SCOPES)) fail(Reason.INVALID_SCOPE, `scopes must be some of ${AGENT_SCOPES.join(", ")}`);
  const user = await deps.users.findById(deps.db, req.userId);
  if (!user) fail(Reason.NOT_FOUND, "no such user");
  const client = req.clientId ? await deps.clients.findClient(deps.db, req.clientId) : undefined;
  if (req.clientId && !client) fail(Reason.NOT_FOUND, "no such client");
  const now = deps.clock();
  const refresh = firstRefresh(client);
  // Before the grant exists: a 503 leaves no grant without a token.
  await requireSigning(deps.keyring);
  const g = await callerTransaction(deps.db, ctx.signal, "before the grant was issued", async (trx) => {
    const vaultId = req.vaultId.toLowerCase();
    const dead = await deadBudgetVault(deps.vaults, trx, vaultId);
    if (dead) fail(Reason.INVALID_TARGET, dead);
    // Checked (and held) in the transaction that inserts the grant, like its principal.
    if ((await deps.vaults.vaultOwner(trx, vaultId, true)) !== user.id) fail(Reason.INVALID_TARGET, "the vault does not belong to the user");
    // The budget's principal on a budget's vault, else this user's and client's.
    const agentId = await deps.agents.principalForGrant(trx, {
      id: randomUUID(),
      userId: user.id,
      vaultId,
      clientKey: client?.clientId ?? "",
      displayName: client?.clientName ?? "Operator-issued grants",
      at: now,
    });
    const grant = await insertGrant(
      deps,
      trx,
      {
        userId: user.id,
        clientId: client?.clientId ?? null,
        agentPrincipalId: agentId,
        vaultId,
        scopes,
        stepUp: req.stepUp,
        authTime: req.stepUp ? now : null,
      },
      refresh,
    );
    await appendAudit(deps, trx, ctx, { actor: "admin", action: "grant.issue", subject: grant.id });
    return grant;
  });
  return { token: await signToken(deps, g, refresh.token) };
}

/** GrantsService.RevokeToken: a client revokes an access or refresh token it was issued (its whole lineage). */
export async function revokeToken(deps: RevokeTokenDeps, req: RevokeTokenRequest, ctx: HandlerContext) {
  const client = await deps.directory.authenticate(ctx, req.clientId, req.clientSecret);
  let grant: GrantRecord | undefined;
  if (req.token.startsWith("vgr_")) grant = await deps.grants.findGrantByRefresh(deps.db, sha256Hex(req.token));
  else {
    // An access token past its hour still names its lineage, which may live on through refreshes.
    const claims = await deps.verifier.verifyEvenIfExpired(req.token);
    grant = claims ? await deps.grants.findGrant(deps.db, claims.jti) : undefined;
  }
  // RFC 7009 2.2: an unknown or already invalid token is not an error.
  if (!grant) return {};
  if (grant.clientId !== client.clientId) fail(Reason.INVALID_REQUEST, "the token was not issued to this client");
  const found = grant;
  await revoking(deps, ctx, `client:${client.clientId}`, async (trx, cancel) => {
    await deps.grants.revokeLineage(trx, found.lineageId, deps.clock(), "client_revocation");
    await cancel({ userId: found.userId, lineageId: found.lineageId }, deps.clock());
    await appendAudit(deps, trx, ctx, { actor: `client:${client.clientId}`, action: "oauth.revoke", subject: found.id });
  });
  return {};
}
