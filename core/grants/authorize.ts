import { randomUUID } from "node:crypto";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { ApproveAuthorizationRequest, CheckAuthorizationRequest, ExchangeCodeRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { callerTransaction } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { Keyring } from "../keys/keyring.js";
import { requireSigning } from "../keys/require-signing.js";
import { constantTimeEqual, sha256Base64url, sha256Hex } from "../../lib/crypto.js";
import { isolated } from "../../lib/text.js";
import { uuidv7 } from "../../lib/uuidv7.js";
import { randomBase64url } from "../../lib/random.js";
import { UUID } from "../../lib/uuid.js";
import type { SessionVerifier, SignedIn } from "../identity/sessions.js";
import type { UsersStore } from "../identity/users-store.js";
import { parseScope } from "../../lib/scopes.js";
import { isSubset, needsStepUp } from "./scopes.js";
import { ACCESS_TOKEN_TTL_SECONDS } from "./access-token.js";
import { appendAudit, type AuditDeps } from "./audit.js";
import { callFacts } from "../context.js";
import type { ClientDirectory } from "./client-auth.js";
import { clientInit } from "./clients.js";
import { isRegisteredRedirectUri } from "./client-metadata.js";
import { CODE_TTL_MS, deadBudgetStatus, deadBudgetVault, insertGrant, firstRefresh, signToken, type GrantAudience } from "./issue.js";
import type { ClientRecord, ClientsStore } from "./stores/clients.js";
import type { AgentsStore } from "./stores/agents.js";
import type { CodesStore } from "./stores/codes.js";
import type { GrantsStore } from "./stores/grants.js";
import type { GrantVaultsStore } from "./stores/vaults.js";
import type { InFlight } from "./stores/budget-grants.js";
import { revoking } from "./revoking.js";

export interface CheckAuthorizationDeps {
  db: Db;
  directory: ClientDirectory;
  vaults: GrantVaultsStore;
  sessions: SessionVerifier;
  audience: GrantAudience;
}

export interface ApproveAuthorizationDeps extends CheckAuthorizationDeps, AuditDeps {
  clients: ClientsStore;
  agents: AgentsStore;
  codes: CodesStore;
}

export interface ExchangeCodeDeps extends AuditDeps {
  db: Db;
  /** A replayed code revokes what it issued: what that left open is cancelled (revoking.ts). */
  inFlight: InFlight;
  directory: ClientDirectory;
  keyring: Keyring;
  audience: GrantAudience;
  grants: GrantsStore;
  codes: CodesStore;
  vaults: GrantVaultsStore;
  users: UsersStore;
}

const CODE_VERIFIER = /^[A-Za-z0-9._~-]{43,128}$/;

/** True when `verifier` is well formed and its S256 hash is the code's challenge (RFC 7636 4.6). */
const provesChallenge = (verifier: string, challenge: string) => CODE_VERIFIER.test(verifier) && constantTimeEqual(sha256Base64url(verifier), challenge);

/** The vault a `urn:<ns>:vault:<uuid>` resource names (its UUID in any case, read lower case), or "". */
export function vaultOfResource(prefix: string, resource: string): string {
  const id = resource.startsWith(prefix) ? resource.slice(prefix.length) : "";
  return UUID.test(id) ? id.toLowerCase() : "";
}

/** How the consent page names a vault: a budget's by the name its agent gave it. */
function vaultLabel(v: { id: string; parentVaultId: string | null; budgetName: string | null }) {
  // The agent chose the name: a bidi override in it cannot reorder the id after it.
  if (v.budgetName !== null) return `Budget “${isolated(v.budgetName)}” ${v.id.slice(0, 8)}`;
  return `${v.parentVaultId ? "Sub-vault" : "Main vault"} ${v.id.slice(0, 8)}`;
}

/**
 * Runs checks that follow the client's and its redirect URI's verification. Their
 * refusals say so (redirect_uri_verified): only such a refusal may be sent back to the
 * redirect URI; anything else is shown to the user where they are.
 */
async function afterRedirectVerified<T>(redirectUri: string, checks: () => Promise<T>): Promise<T> {
  try {
    return await checks();
  } catch (err) {
    const detail = errorDetailOf(err);
    if (!detail || !(err instanceof ConnectError)) throw err;
    const value = { ...detail, redirectUriVerified: true, redirectUri };
    throw new ConnectError(err.rawMessage, err.code, err.metadata, [{ desc: ErrorDetailSchema, value }], err.cause);
  }
}

/** Where the answer goes. RFC 6749 3.1.2.3: a client with one registered URI may leave redirect_uri out; with several it must name one. */
function redirectUriOf(client: ClientRecord, presented: string): string {
  if (!presented) {
    if (client.redirectUris.length !== 1) fail(Reason.INVALID_REQUEST, "redirect_uri is required: this application registered several return addresses");
    return client.redirectUris[0]!;
  }
  // Exact match but for a loopback port (RFC 9700 2.1): the redirect URI is trusted from here on.
  if (!isRegisteredRedirectUri(client.redirectUris, presented)) fail(Reason.INVALID_REDIRECT_URI, "redirect_uri is not registered for this client");
  return presented;
}

/** The authorization request's checks, in order; no side effects. */
async function authorization(deps: CheckAuthorizationDeps, req: CheckAuthorizationRequest, caller: string) {
  const client = req.clientId ? await deps.directory.find(req.clientId, caller) : undefined;
  if (!client) fail(Reason.INVALID_CLIENT, "unknown client_id");
  const redirectUri = redirectUriOf(client, req.redirectUri);
  return { redirectUri, ...(await afterRedirectVerified(redirectUri, () => verifiedAuthorization(deps, client, req))) };
}

/** The checks after the client's and its redirect URI's: their refusals may be sent back to it. */
async function verifiedAuthorization(deps: CheckAuthorizationDeps, client: ClientRecord, req: CheckAuthorizationRequest) {
  const { vaultUrnPrefix, mcpResources } = deps.audience;
  if (req.codeChallengeMethod !== "S256") fail(Reason.INVALID_REQUEST, "PKCE with code_challenge_method S256 is required");
  if (!/^[A-Za-z0-9_-]{43}$/.test(req.codeChallenge)) fail(Reason.INVALID_REQUEST, "code_challenge must be the base64url SHA-256 of the code verifier");
  const scopes = parseScope(req.scope);
  if (!scopes) fail(Reason.INVALID_SCOPE, "scope must be scope names separated by single spaces");
  if (scopes.length === 0) fail(Reason.INVALID_SCOPE, "scope is required");
  if (!isSubset(scopes, client.scopes)) fail(Reason.INVALID_SCOPE, "scope exceeds the client's registration");
  let vaultId = "";
  for (const resource of req.resources) {
    if (mcpResources.has(resource)) continue;
    const id = vaultOfResource(vaultUrnPrefix, resource);
    if (!id) fail(Reason.INVALID_TARGET, "resource must be a vault URN or the MCP server URL");
    if (vaultId && vaultId !== id) fail(Reason.INVALID_TARGET, "a grant binds one vault");
    vaultId = id;
  }
  let vaults: { vaultId: string; urn: string; label: string }[] = [];
  // The user's vaults no grant may bind, and why: never offered, refused if chosen.
  const dead = new Map<string, string>();
  let stepUpFresh = false;
  let s: SignedIn | undefined;
  if (req.sessionToken) {
    s = await deps.sessions.verify(req.sessionToken);
    stepUpFresh = s.stepUpFresh;
    const owned = await deps.vaults.vaultsOfUser(deps.db, s.userId);
    for (const v of owned) {
      const why = deadBudgetStatus(v.budgetStatus);
      if (why) dead.set(v.id, why);
    }
    if (vaultId && !owned.some((v) => v.id === vaultId)) fail(Reason.INVALID_TARGET, "the vault is not one of the signed-in user's vaults");
    const deadNamed = dead.get(vaultId);
    if (deadNamed) fail(Reason.INVALID_TARGET, deadNamed);
    vaults = owned
      .filter((v) => !dead.has(v.id) && (!vaultId || v.id === vaultId))
      .map((v) => ({ vaultId: v.id, urn: vaultUrnPrefix + v.id, label: vaultLabel(v) }));
  }
  return { client, scopes, vaultId, vaults, dead, stepUpRequired: needsStepUp(scopes), stepUpFresh, session: s };
}

/** GrantsService.CheckAuthorization: what the consent page shows, or why the request is refused. */
export async function checkAuthorization(deps: CheckAuthorizationDeps, req: CheckAuthorizationRequest, ctx: HandlerContext) {
  const r = await authorization(deps, req, callFacts(ctx).clientAddress);
  return {
    client: clientInit(r.client),
    scopes: r.scopes,
    vaultId: r.vaultId,
    stepUpRequired: r.stepUpRequired,
    vaults: r.vaults,
    stepUpFresh: r.stepUpFresh,
    redirectUri: r.redirectUri,
  };
}

/** GrantsService.ApproveAuthorization: the signed-in owner consents; a code bound to the vault is issued. */
export async function approveAuthorization(deps: ApproveAuthorizationDeps, req: ApproveAuthorizationRequest, ctx: HandlerContext) {
  if (!req.request) fail(Reason.INVALID_REQUEST, "request is required");
  const request = req.request;
  const r = await authorization(deps, { ...request, sessionToken: req.sessionToken }, callFacts(ctx).clientAddress);
  // The client and its redirect URI are verified: refusals may go back to it.
  const verified = { redirectUriVerified: true, redirectUri: r.redirectUri };
  const s = r.session ?? fail(Reason.ACCESS_DENIED, "sign in first", verified);
  const vaultId = (r.vaultId || req.vaultId).toLowerCase();
  const deadChoice = r.dead.get(vaultId);
  if (deadChoice) fail(Reason.INVALID_TARGET, deadChoice, verified);
  if (!vaultId || !r.vaults.some((v) => v.vaultId === vaultId)) fail(Reason.INVALID_TARGET, "choose one of your vaults", verified);
  if (r.stepUpRequired && !r.stepUpFresh) fail(Reason.ACCESS_DENIED, "step-up is required to approve these scopes", verified);
  const code = `vgc_${randomBase64url(32)}`;
  const now = deps.clock();
  await callerTransaction(deps.db, ctx.signal, "before the consent was recorded", async (trx) => {
    // A metadata-document client gets (or refreshes) its row: codes and grants refer to it.
    if (r.client.metadataDocument) await deps.clients.upsertDocumentClient(trx, r.client);
    // A budget closed or declined since the check above: refused like the page's own choice.
    const dead = await deadBudgetVault(deps.vaults, trx, vaultId);
    if (dead) fail(Reason.INVALID_TARGET, dead, verified);
    // Still the user's, and held until the code is inserted (a budget cleanup may delete it).
    if ((await deps.vaults.vaultOwner(trx, vaultId, true)) !== s.userId) fail(Reason.INVALID_TARGET, "choose one of your vaults", verified);
    // On a budget's vault the code acts as the budget; elsewhere as the principal of this
    // user and client, created on first consent. The exchange copies it to the grant.
    const agentPrincipalId = await deps.agents.principalForGrant(trx, {
      id: randomUUID(),
      userId: s.userId,
      vaultId,
      clientKey: r.client.clientId,
      displayName: r.client.clientName,
      at: now,
    });
    await deps.codes.insertCode(trx, {
      codeHash: sha256Hex(code),
      clientId: r.client.clientId,
      userId: s.userId,
      agentPrincipalId,
      vaultId,
      scopes: r.scopes,
      // As the request named it ("" for none): the exchange must name the same (RFC 6749 4.1.3).
      redirectUri: request.redirectUri,
      codeChallenge: request.codeChallenge,
      stepUp: r.stepUpFresh,
      authTime: r.stepUpFresh ? s.stepUpAt : null,
      expiresAt: new Date(now.getTime() + CODE_TTL_MS),
      consumedAt: null,
      grantId: null,
      // RFC 8707: the exact MCP resources asked for become part of the token's audience.
      audiences: [...new Set(request.resources.map((x) => deps.audience.mcpResources.get(x) ?? "").filter((x) => x && x !== deps.audience.mcpUrl))],
    });
    await appendAudit(deps, trx, ctx, { actor: `user:${s.userId}`, action: "oauth.consent", subject: r.client.clientId });
  });
  return { code, issuer: deps.audience.issuer };
}

/**
 * RFC 6749 4.1.3: the exchange names the redirect_uri the authorization request named. A code
 * asked for without one (stored as "") may be exchanged without one, or naming the only registered URI.
 */
function sameRedirectUri(asked: string, presented: string, registered: readonly string[]): boolean {
  if (asked === presented) return true;
  return asked === "" && registered.length === 1 && registered[0] === presented;
}

/** GrantsService.ExchangeCode: an authorization code and its PKCE verifier for the first grant of a lineage. */
export async function exchangeCode(deps: ExchangeCodeDeps, req: ExchangeCodeRequest, ctx: HandlerContext) {
  const { mcpResources, vaultUrnPrefix } = deps.audience;
  const client = await deps.directory.authenticate(ctx, req.clientId, req.clientSecret);
  await requireSigning(deps.keyring);
  const now = deps.clock();
  const refresh = firstRefresh(client);
  if (req.code && CODE_VERIFIER.test(req.codeVerifier) && req.resources.every((r) => mcpResources.has(r))) {
    const id = uuidv7();
    const issued = await deps.grants.exchangeCodeFast(
      {
        codeHash: sha256Hex(req.code),
        clientId: client.clientId,
        redirectUri: req.redirectUri,
        codeChallenge: sha256Base64url(req.codeVerifier),
        grantId: id,
        refreshHash: refresh.hash,
        now,
        expiresAt: new Date(now.getTime() + ACCESS_TOKEN_TTL_SECONDS * 1000),
      },
      { ...callFacts(ctx), actor: `client:${client.clientId}`, action: "oauth.code_exchange" },
      ctx.signal,
    );
    if (issued) return { token: await signToken(deps, issued, refresh.token) };
  }
  // Anything else (replay, expiry, mismatch, a vault resource) is decided under a lock.
  const outcome = await revoking(deps, ctx, `client:${client.clientId}`, async (trx, cancel) => {
    const c = req.code ? await deps.codes.lockCode(trx, sha256Hex(req.code)) : undefined;
    if (!c || c.clientId !== client.clientId) return { kind: "invalid" as const, why: "unknown code" };
    if (c.consumedAt) {
      // Only a replay with the code's PKCE verifier revokes (RFC 6749 4.1.2): the code alone,
      // seen in a redirect, must not let anyone end a public client's grant.
      if (!provesChallenge(req.codeVerifier, c.codeChallenge)) return { kind: "invalid" as const, why: "used code without its PKCE verifier" };
      const issued = c.grantId ? await deps.grants.findGrant(trx, c.grantId) : undefined;
      if (issued) {
        await deps.grants.revokeLineage(trx, issued.lineageId, now, "code_replay");
        await cancel({ userId: issued.userId, lineageId: issued.lineageId }, now);
      }
      await appendAudit(deps, trx, ctx, {
        actor: `client:${client.clientId}`,
        action: "oauth.code_replay",
        subject: c.grantId ?? "",
        outcome: "failure",
        reason: "code_replay",
      });
      return { kind: "invalid" as const, why: "replayed code" };
    }
    if (c.expiresAt.getTime() <= now.getTime()) return { kind: "invalid" as const, why: "expired code" };
    if (!sameRedirectUri(c.redirectUri, req.redirectUri, client.redirectUris)) return { kind: "invalid" as const, why: "redirect_uri mismatch" };
    if (!provesChallenge(req.codeVerifier, c.codeChallenge)) return { kind: "invalid" as const, why: "PKCE mismatch" };
    for (const resource of req.resources) {
      if (!mcpResources.has(resource) && vaultOfResource(vaultUrnPrefix, resource) !== c.vaultId) return { kind: "target" as const };
    }
    // RFC 6749 5.2 invalid_grant for an account that is no longer active; the code is not consumed.
    if ((await deps.users.findById(trx, c.userId))?.status !== "active") return { kind: "invalid" as const, why: "user inactive" };
    // A budget closed or declined since the consent: nothing is issued, the code stays unused.
    const dead = await deadBudgetVault(deps.vaults, trx, c.vaultId);
    if (dead) return { kind: "dead" as const, why: dead };
    const g = await insertGrant(
      deps,
      trx,
      {
        userId: c.userId,
        clientId: client.clientId,
        agentPrincipalId: c.agentPrincipalId,
        vaultId: c.vaultId,
        scopes: c.scopes,
        stepUp: c.stepUp,
        authTime: c.authTime,
        audiences: c.audiences,
      },
      refresh,
    );
    await deps.codes.consumeCode(trx, c.codeHash, g.id, now);
    await appendAudit(deps, trx, ctx, { actor: `client:${client.clientId}`, action: "oauth.code_exchange", subject: g.id });
    return { kind: "issued" as const, grant: g };
  });
  if (outcome.kind === "target") fail(Reason.INVALID_TARGET, "resource does not match the authorization");
  if (outcome.kind === "dead") fail(Reason.INVALID_GRANT, `the authorization code cannot be used: ${outcome.why}`);
  // One generic answer; the reason stays in the cause (oidc-provider's pkce.js habit).
  if (outcome.kind === "invalid") fail(Reason.INVALID_GRANT, "the authorization code is invalid, expired or already used", {}, outcome.why);
  return { token: await signToken(deps, outcome.grant, refresh.token) };
}
