import { createHmac, randomBytes, randomInt, randomUUID } from "node:crypto";
import { ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { GrantsService, type CheckAuthorizationRequest, type TokenResponseSchema, type OAuthClientSchema } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { KeyringError, type Keyring } from "../keys/keyring.js";
import type { AuditStore } from "../audit/store.js";
import type { Db } from "../db/knex.js";
import { kClientAddress, kOperator, kRequestId } from "../context.js";
import { constantTimeEqual, sha256Base64url, sha256Hex } from "../../lib/crypto.js";
import type { SecretHasher } from "../secrets/hasher.js";
import { createClientSecretChecker } from "../secrets/client-secret-checker.js";
import { normaliseEmail } from "../identity/users-store.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { ClientRecord, GrantRecord, GrantsStore } from "./store.js";
import type { SessionVerifier, SignedIn } from "../identity/sessions.js";
import { AGENT_SCOPES, isSubset, needsStepUp, parseScope } from "./scopes.js";
import { ACCESS_TOKEN_TTL_SECONDS, AGENT_TOKEN_HEADER, agentTokenClaims, type AccessTokenVerifier } from "./access-token.js";
import { checkClientMetadata } from "./client-metadata.js";
import { createClientIdMetadataResolver, isClientIdUrl } from "./client-id-metadata.js";
import { UUID } from "../uuid.js";
import { uuidv7 } from "../../lib/uuidv7.js";
import { randomBase64url } from "../../lib/random.js";
import { deriveKey } from "../keys/outside-keys.js";
import { createSecretBox } from "../partners/webhooks/signing.js";
import type { HostResolver } from "../net/resolver.js";

export interface GrantsServiceDeps {
  db: Db;
  keyring: Keyring;
  audit: AuditStore;
  clock: () => Date;
  store: GrantsStore;
  secrets: SecretHasher;
  rateLimits: RateLimitStore;
  logger: Logger;
  /** `iss` of every token (DESIGN 3). */
  issuer: string;
  /** First `aud` of agent tokens and the protected resource (DESIGN 3, 4.2). */
  mcpUrl: string;
  /** Vault URN namespace: `urn:<ns>:vault:<uuid>`. */
  urnNamespace: string;
  /** DESIGN 3: "about 30 s, configurable". */
  refreshGraceSeconds: number;
  /** Agent access-token verification, shared with the budgets service (one cache per process). */
  verifier: AccessTokenVerifier;
  /** Web sessions, shared with the budgets service's dashboard RPCs. */
  sessions: SessionVerifier;
  /** Failed client-secret checks per minute per agent client id (default 30). */
  clientFailuresPerMinute?: number;
  /** Dynamic client registrations per minute per client address a gateway vouched for ("" = direct callers, one bucket). */
  registrationLimitPerMinute: number;
  /** Development only: fetch client metadata documents from private addresses, and http on loopback (docs/reference/agent-oauth.md). */
  clientMetadataAllowPrivate?: boolean;
  /** The key outside the database behind sign-in code hashes and the dev outbox (core/keys/outside-keys.ts). */
  signinCodeKey: Buffer;
  /** Resolves metadata document hosts off the thread pool (core/net/resolver.ts). */
  hostResolver?: HostResolver;
}

type TokenInit = MessageInitShape<typeof TokenResponseSchema>;

/** DESIGN 4.2: codes live 60 s. */
export const CODE_TTL_MS = 60_000;
/** Refresh tokens end 30 days after their grant was issued (a decision; docs/reference/agent-oauth.md). */
const REFRESH_TTL_MS = 30 * 24 * 3600_000;
const SESSION_TTL_MS = 12 * 3600_000;
/** DESIGN 4.1: a step-up counts for 10 minutes. */
const OTP_TTL_MS = 10 * 60_000;
const OTP_MAX_ATTEMPTS = 5;
/**
 * Wrong codes per account (the normalised address) per 15 minutes, from however many
 * challenges and client addresses; past it the account's code sign-in and step-up answer
 * 429, even for the right code, until the oldest wrong code leaves the window.
 */
const OTP_WRONG_PER_ACCOUNT = 10;
const OTP_WRONG_WINDOW_SECONDS = 900;
/**
 * Codes e-mailed per account: one per 30 s for each purpose (so the step-up right after a
 * sign-in is not refused) and 10 an hour in all, which lets a person do a few
 * authorizations with sign-in and step-up in a row while bounding mail to one address.
 */
const OTP_SEND_GAP_SECONDS = 30;
const OTP_SENDS_PER_HOUR = 10;
/** Marks a dev outbox text sealed under the outside key (older rows were plain). */
const SEALED = "sealed:";
/** MCP endpoints (DESIGN 4.1) that may be named as `resource`. */
export const MCP_RESOURCE_PATHS = ["/mcp/read", "/mcp/write", "/mcp/treasury", "/write"];
const OPERATOR_CLIENT = "operator";

/** A refresh token to issue: the token itself (handed out once), and what is stored of it. */
interface NewRefresh {
  token: string;
  hash: string;
  salt: string | null;
}

/** A lineage's first refresh token (code exchange, IssueGrant, SupersedeGrant): 32 random bytes. */
function randomRefresh(): NewRefresh {
  const token = `vgr_${randomBase64url(32)}`;
  return { token, hash: sha256Hex(token), salt: null };
}

/**
 * The successor's token on rotation: HMAC-SHA256 keyed with the refresh token presented,
 * over a random salt stored on the successor row. The database holds the salt but never
 * the presented token; whoever holds the presented token lacks the salt. A grace-window
 * retry presents the same token and recomputes the same successor token from the stored
 * salt, so nothing that could mint a token is ever stored (DESIGN 3).
 */
function derivedRefreshToken(presented: string, salt: string): string {
  return `vgr_${createHmac("sha256", presented).update(salt).digest("base64url")}`;
}

function derivedRefresh(presented: string): NewRefresh & { salt: string } {
  const salt = randomBase64url(32);
  const token = derivedRefreshToken(presented, salt);
  return { token, hash: sha256Hex(token), salt };
}

export function createGrantsService(deps: GrantsServiceDeps): ServiceImpl<typeof GrantsService> {
  const { db, store } = deps;
  const { verifier } = deps;
  const vaultUrnPrefix = `urn:${deps.urnNamespace}:vault:`;
  const mcpResources = new Set([deps.mcpUrl, ...MCP_RESOURCE_PATHS.map((p) => deps.mcpUrl + p)]);
  // Client secrets: failures counted per client id before any derivation (right secrets
  // give their slot back), derivations scheduled fairly, verified secrets remembered.
  const secretCheck = createClientSecretChecker({
    hasher: deps.secrets,
    rateLimits: deps.rateLimits,
    clock: deps.clock,
    logger: deps.logger,
    budget: { key: "oauth-client-fail:", limit: deps.clientFailuresPerMinute ?? 30, counts: "failures" },
  });
  // OAuth clients are immutable once registered (no update or rotation RPC), so a short
  // per-process cache of their rows is safe across replicas and saves a round trip.
  const clientCache = new Map<string, { client: ClientRecord; until: number }>();
  // A client_id that is an https URL names its metadata document: fetched, checked, cached.
  const documents = createClientIdMetadataResolver({ clock: deps.clock, allowPrivate: deps.clientMetadataAllowPrivate ?? false, resolver: deps.hostResolver });
  if (deps.clientMetadataAllowPrivate) deps.logger.warn("client metadata documents may be fetched from private and loopback addresses (development setting)");
  async function findClient(clientId: string): Promise<ClientRecord | undefined> {
    if (isClientIdUrl(clientId)) return documents.resolve(clientId);
    const now = Date.now();
    const hit = clientCache.get(clientId);
    if (hit && hit.until > now) return hit.client;
    const client = await store.findClient(db, clientId);
    if (client) {
      if (clientCache.size > 10_000) clientCache.clear();
      clientCache.set(clientId, { client, until: now + 60_000 });
    }
    return client;
  }

  // Sign-in codes: a keyed hash, and dev outbox texts sealed, under the outside key, so the
  // database alone neither reverses a six-digit code nor shows one.
  const codeHashKey = deriveKey(deps.signinCodeKey, "sign-in code hash");
  const outboxBox = createSecretBox(deriveKey(deps.signinCodeKey, "dev outbox"));
  const hashCode = (challengeId: string, code: string) => createHmac("sha256", codeHashKey).update(`${challengeId}:${code}`).digest("hex");
  const unseal = (text: string) => {
    if (!text.startsWith(SEALED)) return text;
    try {
      return outboxBox.open(text.slice(SEALED.length));
    } catch {
      return "(sealed under another key)";
    }
  };
  const mail = (conn: Knex | Knex.Transaction, m: { email: string; subject: string; body: string; at: Date }) =>
    store.insertOutbox(conn, { id: randomUUID(), email: m.email, subject: SEALED + outboxBox.seal(m.subject), body: SEALED + outboxBox.seal(m.body), at: m.at });

  const requestId = (ctx: HandlerContext) => ctx.values.get(kRequestId);
  const audit = (conn: Knex | Knex.Transaction, ctx: HandlerContext, e: { actor: string; action: string; subject?: string; outcome?: "success" | "failure"; reason?: string }) =>
    deps.audit.append(conn, { requestId: requestId(ctx), outcome: "success", ...e, clientAddress: ctx.values.get(kClientAddress), at: deps.clock() });

  async function authenticateClient(ctx: HandlerContext, clientId: string, secret: string): Promise<ClientRecord> {
    if (isClientIdUrl(clientId)) {
      // A metadata-document client is public (token_endpoint_auth_method none): it proves
      // nothing here; the code it exchanges is bound to its client_id and PKCE verifier.
      if (secret) fail(Reason.INVALID_CLIENT, "a client_id metadata document client is a public client and sends no client_secret");
      return documents.resolve(clientId);
    }
    // A registered client always authenticates with its secret (an empty one never verifies).
    if (clientId.length === 0 || clientId.length > 128 || secret.length === 0 || secret.length > 256) fail(Reason.INVALID_CLIENT, "client authentication failed");
    const client = await findClient(clientId);
    const stored = client?.secretHash ?? undefined;
    const remembered = stored !== undefined ? secretCheck.remembered(clientId, secret) : undefined;
    if (client && remembered !== undefined && constantTimeEqual(remembered, stored!)) return client;
    // spec 5.2 habit: unknown clients cost the same derivation as a wrong secret.
    const checked = await secretCheck.check(clientId, secret, stored, ctx.values.get(kClientAddress));
    if (!client || !checked.ok) fail(Reason.INVALID_CLIENT, "client authentication failed");
    // A hash of older scrypt parameters is replaced once (a concurrent check may have done it).
    if (checked.upgrade) {
      const replaced = await store.replaceClientSecretHash(db, clientId, checked.hash, checked.upgrade);
      if (replaced) clientCache.delete(clientId);
      secretCheck.remember(clientId, secret, replaced ? checked.upgrade : checked.hash);
    }
    return client;
  }

  /** The token response for a grant; the refresh token is the one issued with it (only its hash is stored). */
  function signToken(g: GrantRecord, refreshToken: string): TokenInit {
    if (!deps.keyring.current()) fail(Reason.SIGNING_UNAVAILABLE, "signing is unavailable", {}, deps.keyring.problem());
    const claims = agentTokenClaims({
      issuer: deps.issuer,
      mcpUrl: deps.mcpUrl,
      vaultUrn: vaultUrnPrefix + g.vaultId,
      userId: g.userId,
      clientId: g.clientId ?? OPERATOR_CLIENT,
      agentId: g.agentPrincipalId,
      vaultId: g.vaultId,
      scopes: g.scopes,
      grantId: g.id,
      issuedAt: g.issuedAt,
      authTime: g.stepUp ? g.authTime : null,
      audiences: g.audiences,
    });
    let accessToken: string;
    try {
      accessToken = deps.keyring.signJwt(AGENT_TOKEN_HEADER, claims as unknown as Record<string, unknown>);
    } catch (err) {
      if (err instanceof KeyringError) fail(Reason.SIGNING_UNAVAILABLE, "signing is unavailable", {}, err);
      throw err;
    }
    return {
      accessToken,
      tokenType: "Bearer",
      expiresIn: BigInt(ACCESS_TOKEN_TTL_SECONDS),
      refreshToken,
      scope: claims.scope,
      jti: g.id,
    };
  }

  async function insertGrant(
    trx: Knex.Transaction,
    g: Pick<GrantRecord, "userId" | "clientId" | "agentPrincipalId" | "vaultId" | "scopes" | "stepUp" | "authTime"> & { lineageId?: string; parentGrantId?: string; audiences?: string[] },
    refresh: NewRefresh,
  ): Promise<GrantRecord> {
    const id = uuidv7();
    const now = deps.clock();
    const record: GrantRecord = {
      id,
      lineageId: g.lineageId ?? id,
      parentGrantId: g.parentGrantId ?? null,
      userId: g.userId,
      clientId: g.clientId,
      agentPrincipalId: g.agentPrincipalId,
      vaultId: g.vaultId,
      scopes: g.scopes,
      state: "active",
      stepUp: g.stepUp,
      authTime: g.authTime,
      issuedAt: now,
      expiresAt: new Date(now.getTime() + ACCESS_TOKEN_TTL_SECONDS * 1000),
      refreshHash: refresh.hash,
      refreshSalt: refresh.salt,
      refreshUsedAt: null,
      successorId: null,
      audiences: g.audiences ?? [],
    };
    await store.insertGrant(trx, record);
    return record;
  }

  /**
   * Why no grant may bind this vault: it is a closed or declined budget's (checked under
   * the budget row's lock, see lockBudgetStatusOfVault); undefined when one may.
   */
  async function deadBudgetVault(trx: Knex.Transaction, vaultId: string): Promise<string | undefined> {
    const status = await store.lockBudgetStatusOfVault(trx, vaultId);
    if (status === "closed") return "the vault belongs to a closed budget";
    if (status === "declined") return "the vault belongs to a budget its owner declined";
    return undefined;
  }

  /** Verifies an agent token and reads its grant afresh (spec 3.2: on every call). */
  async function activeGrant(accessToken: string): Promise<GrantRecord> {
    const claims = accessToken ? await verifier.verify(accessToken) : undefined;
    if (!claims) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
    const grant = await store.findGrantWithUser(claims.jti);
    if (!grant) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
    if (grant.state !== "active") fail(Reason.INVALID_TOKEN, `the grant has been ${grant.state}`);
    if (!grant.userActive) fail(Reason.INVALID_TOKEN, "the user's account is not active");
    if (grant.expiresAt.getTime() + 30_000 < deps.clock().getTime()) fail(Reason.INVALID_TOKEN, "the access token has expired");
    return grant;
  }

  /** The signed-in user of a web session token (one verifier for every service: core/identity). */
  const session = (token: string): Promise<SignedIn> => deps.sessions.verify(token);

  function vaultLabel(v: { id: string; parentVaultId: string | null }) {
    return `${v.parentVaultId ? "Sub-vault" : "Main vault"} ${v.id.slice(0, 8)}`;
  }

  /**
   * Runs checks that follow the client's and its redirect URI's verification. Their
   * refusals say so (redirect_uri_verified): only such a refusal may be sent back to the
   * redirect URI; anything else is shown to the user where they are.
   */
  async function afterRedirectVerified<T>(checks: () => Promise<T>): Promise<T> {
    try {
      return await checks();
    } catch (err) {
      const detail = errorDetailOf(err);
      if (!detail || !(err instanceof ConnectError)) throw err;
      throw new ConnectError(err.rawMessage, err.code, err.metadata, [{ desc: ErrorDetailSchema, value: { ...detail, redirectUriVerified: true } }], err.cause);
    }
  }

  /** spec 4.3 / DESIGN 4.2, in order; no side effects. */
  async function checkAuthorization(req: CheckAuthorizationRequest) {
    const client = req.clientId ? await findClient(req.clientId) : undefined;
    if (!client) fail(Reason.INVALID_CLIENT, "unknown client_id");
    // Exact match only (RFC 9700 2.1): the redirect URI is trusted from here on.
    if (!client.redirectUris.includes(req.redirectUri)) fail(Reason.INVALID_REDIRECT_URI, "redirect_uri is not registered for this client");
    return afterRedirectVerified(() => checkVerifiedAuthorization(client, req));
  }

  /** The checks after the client's and its redirect URI's: their refusals may be sent back to it. */
  async function checkVerifiedAuthorization(client: ClientRecord, req: CheckAuthorizationRequest) {
    if (req.codeChallengeMethod !== "S256") fail(Reason.INVALID_REQUEST, "PKCE with code_challenge_method S256 is required");
    if (!/^[A-Za-z0-9_-]{43}$/.test(req.codeChallenge)) fail(Reason.INVALID_REQUEST, "code_challenge must be the base64url SHA-256 of the code verifier");
    const scopes = parseScope(req.scope);
    if (!scopes || scopes.length === 0) fail(Reason.INVALID_SCOPE, "scope is required");
    if (!isSubset(scopes, client.scopes)) fail(Reason.INVALID_SCOPE, "scope exceeds the client's registration");
    let vaultId = "";
    for (const resource of req.resources) {
      if (mcpResources.has(resource)) continue;
      const id = resource.startsWith(vaultUrnPrefix) ? resource.slice(vaultUrnPrefix.length) : "";
      if (!UUID.test(id)) fail(Reason.INVALID_TARGET, "resource must be a vault URN or the MCP server URL");
      if (vaultId && vaultId !== id.toLowerCase()) fail(Reason.INVALID_TARGET, "a grant binds one vault");
      vaultId = id.toLowerCase();
    }
    let vaults: { vaultId: string; urn: string; label: string }[] = [];
    let stepUpFresh = false;
    let s: SignedIn | undefined;
    if (req.sessionToken) {
      s = await session(req.sessionToken);
      stepUpFresh = s.stepUpFresh;
      const owned = await store.vaultsOfUser(db, s.userId);
      if (vaultId && !owned.some((v) => v.id === vaultId)) fail(Reason.INVALID_TARGET, "the vault is not one of the signed-in user's vaults");
      vaults = owned.filter((v) => !vaultId || v.id === vaultId).map((v) => ({ vaultId: v.id, urn: vaultUrnPrefix + v.id, label: vaultLabel(v) }));
    }
    return { client, scopes, vaultId, vaults, stepUpRequired: needsStepUp(scopes), stepUpFresh, session: s };
  }

  function clientInit(c: ClientRecord): MessageInitShape<typeof OAuthClientSchema> {
    return {
      clientId: c.clientId,
      clientName: c.clientName,
      redirectUris: c.redirectUris,
      grantTypes: c.grantTypes,
      responseTypes: c.responseTypes,
      tokenEndpointAuthMethod: c.tokenEndpointAuthMethod,
      scopes: c.scopes,
      clientIdIssuedAt: BigInt(Math.floor(c.createdAt.getTime() / 1000)),
    };
  }

  function grantSummary(g: GrantRecord) {
    return {
      grantId: g.id,
      state: g.state,
      scopes: g.scopes,
      vaultId: g.vaultId,
      clientId: g.clientId ?? "",
      createdAt: BigInt(Math.floor(g.issuedAt.getTime() / 1000)),
      expiresAt: BigInt(Math.floor(g.expiresAt.getTime() / 1000)),
      stepUp: g.stepUp,
    };
  }

  return {
    async getJwks() {
      return { jwksJson: JSON.stringify(await deps.keyring.jwks()) };
    },

    async rotateSigningKey(_req, ctx) {
      try {
        // The previous key is marked rotated in the same transaction as the audit row.
        const rotated = await deps.keyring.rotate((trx, c) => audit(trx, ctx, { actor: "admin", action: "keys.rotate", subject: c.kid }));
        return { kid: rotated.kid, publishedKids: rotated.publishedKids };
      } catch (err) {
        if (err instanceof KeyringError) fail(Reason.INVALID_REQUEST, err.message);
        throw err;
      }
    },

    async retireSigningKey(req, ctx) {
      try {
        const retired = await deps.keyring.retire(req.kid, (trx, c) => audit(trx, ctx, { actor: "admin", action: "keys.retire", subject: c.kid }));
        return { kid: retired.kid, publishedKids: retired.publishedKids };
      } catch (err) {
        if (err instanceof KeyringError) fail(err.code === "not_found" ? Reason.NOT_FOUND : Reason.INVALID_REQUEST, err.message);
        throw err;
      }
    },

    async verifyAgentToken(req) {
      const g = await activeGrant(req.accessToken);
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
    },

    async supersedeGrant(req, ctx) {
      const current = await activeGrant(req.accessToken);
      const wanted = parseScope(req.scope);
      if (!wanted) fail(Reason.INVALID_SCOPE, "scope is malformed");
      const scopes = wanted.length === 0 ? current.scopes : wanted;
      // DESIGN 4.4: agent.grant.issue never widens scope.
      if (!isSubset(scopes, current.scopes)) fail(Reason.INVALID_SCOPE, "scope may not exceed the current grant's");
      const refresh = randomRefresh();
      const next = await db.transaction(async (trx) => {
        const locked = await store.lockGrant(trx, current.id);
        if (!locked || locked.state !== "active") fail(Reason.INVALID_TOKEN, "the grant is no longer active");
        const g = await insertGrant(trx, { ...locked, scopes, lineageId: locked.lineageId, parentGrantId: locked.id }, refresh);
        await store.supersede(trx, locked.id, g.id, deps.clock(), false);
        await audit(trx, ctx, { actor: `agent:${locked.agentPrincipalId}`, action: "agent.grant.issue", subject: g.id });
        return g;
      });
      return { token: signToken(next, refresh.token) };
    },

    async revokeAllGrants(req, ctx) {
      const g = await activeGrant(req.accessToken);
      const revoked = await db.transaction(async (trx) => {
        const n = await store.revokeAllOfUser(trx, g.userId, deps.clock(), "kill_switch");
        await audit(trx, ctx, { actor: `agent:${g.agentPrincipalId}`, action: "killSwitch.all", subject: g.userId, reason: req.reason.slice(0, 200) });
        return n;
      });
      return { revoked };
    },

    async refreshGrant(req, ctx) {
      let clientId = "";
      if (req.clientId || req.clientSecret) clientId = (await authenticateClient(ctx, req.clientId, req.clientSecret)).clientId;
      // An operator-issued grant (no client) refreshes only with the operator credential.
      else if (!ctx.values.get(kOperator)) fail(Reason.INVALID_CLIENT, "client authentication failed");
      const hash = sha256Hex(req.refreshToken);
      const now = deps.clock();
      // The successor's token, if this refresh issues one (the fast path or under the lock).
      const refresh = derivedRefresh(req.refreshToken);
      if (req.refreshToken) {
        const id = uuidv7();
        const rotated = await store.rotateRefreshFast(
          {
            refreshHash: hash,
            clientId,
            issuedAfter: new Date(now.getTime() - REFRESH_TTL_MS),
            grantId: id,
            newRefreshHash: refresh.hash,
            newRefreshSalt: refresh.salt,
            now,
            expiresAt: new Date(now.getTime() + ACCESS_TOKEN_TTL_SECONDS * 1000),
          },
          { requestId: requestId(ctx), actor: `client:${clientId || OPERATOR_CLIENT}`, action: "agent.grant.refresh" },
        );
        if (rotated) return { token: signToken(rotated, refresh.token) };
      }
      const outcome = await db.transaction(async (trx) => {
        // The row lock orders concurrent refreshes of one token: the second sees the
        // first's successor and gets the same pair (no second lineage).
        // A closed or declined budget's vault gets no new grant; its budget row is locked
        // before the grant's (the budgets' lock order), the vault read from an unlocked look.
        const seen = req.refreshToken ? await store.findGrantByRefresh(trx, hash) : undefined;
        const dead = seen ? await deadBudgetVault(trx, seen.vaultId) : undefined;
        const g = req.refreshToken ? await store.lockGrantByRefresh(trx, hash) : undefined;
        if (!g || (g.clientId ?? "") !== clientId) return { kind: "invalid" as const, why: "unknown refresh token" };
        // RFC 6749 5.2 invalid_grant: nothing is issued for an account that is no longer
        // active; the token is not used up, so it works again if the account is reactivated.
        const userActive = (await store.findUser(trx, g.userId))?.status === "active";
        if (g.state === "active" && !g.refreshUsedAt) {
          if (now.getTime() - g.issuedAt.getTime() > REFRESH_TTL_MS) return { kind: "invalid" as const, why: "expired refresh token" };
          if (!userActive) return { kind: "invalid" as const, why: "user inactive" };
          if (dead) return { kind: "invalid" as const, why: dead };
          const next = await insertGrant(trx, { ...g, lineageId: g.lineageId, parentGrantId: g.id }, refresh);
          await store.supersede(trx, g.id, next.id, now, true);
          await audit(trx, ctx, { actor: `client:${clientId || OPERATOR_CLIENT}`, action: "agent.grant.refresh", subject: next.id });
          return { kind: "issued" as const, grant: next, refreshToken: refresh.token };
        }
        if (g.refreshUsedAt && g.successorId && now.getTime() - g.refreshUsedAt.getTime() <= deps.refreshGraceSeconds * 1000) {
          const successor = await store.lockGrant(trx, g.successorId);
          // A retry of a lost response: hand back the same pair while nothing moved on.
          if (successor && successor.state === "active" && !successor.refreshUsedAt) {
            if (!userActive) return { kind: "invalid" as const, why: "user inactive" };
            // The successor's token is derived from the token just presented and the
            // successor's salt; the database alone cannot produce it (DESIGN 3).
            const again = successor.refreshSalt ? derivedRefreshToken(req.refreshToken, successor.refreshSalt) : "";
            if (again && successor.refreshHash && constantTimeEqual(sha256Hex(again), successor.refreshHash)) {
              return { kind: "issued" as const, grant: successor, refreshToken: again };
            }
            // A successor issued before migration 0013 has no salt: its token cannot be
            // reproduced. Nothing was reused, so the lineage stays.
            return { kind: "invalid" as const, why: "successor token not reproducible" };
          }
        }
        if (g.refreshUsedAt) {
          // RFC 9700 4.14.2: a used refresh token presented again revokes the lineage.
          await store.revokeLineage(trx, g.lineageId, now, "refresh_reuse");
          await audit(trx, ctx, { actor: `client:${clientId || OPERATOR_CLIENT}`, action: "agent.grant.refresh_reuse", subject: g.lineageId, outcome: "failure", reason: "refresh_reuse" });
        }
        return { kind: "invalid" as const, why: "refresh token no longer valid" };
      });
      if (outcome.kind !== "issued") fail(Reason.INVALID_GRANT, "the refresh token is invalid, expired or revoked", {}, outcome.why);
      return { token: signToken(outcome.grant, outcome.refreshToken) };
    },

    async issueGrant(req, ctx) {
      if (!UUID.test(req.userId)) fail(Reason.INVALID_REQUEST, "user must be a UUID");
      if (!UUID.test(req.vaultId)) fail(Reason.INVALID_REQUEST, "vault must be a UUID");
      const scopes = [...new Set(req.scopes)];
      if (scopes.length === 0 || !isSubset(scopes, AGENT_SCOPES)) fail(Reason.INVALID_SCOPE, `scopes must be some of ${AGENT_SCOPES.join(", ")}`);
      const user = await store.findUser(db, req.userId);
      if (!user) fail(Reason.NOT_FOUND, "no such user");
      const client = req.clientId ? await store.findClient(db, req.clientId) : undefined;
      if (req.clientId && !client) fail(Reason.NOT_FOUND, "no such client");
      const now = deps.clock();
      const refresh = randomRefresh();
      const g = await db.transaction(async (trx) => {
        const vaultId = req.vaultId.toLowerCase();
        const dead = await deadBudgetVault(trx, vaultId);
        if (dead) fail(Reason.INVALID_TARGET, dead);
        // Checked (and held) in the transaction that inserts the grant, like its principal.
        if ((await store.vaultOwner(trx, vaultId, true)) !== user.id) fail(Reason.INVALID_TARGET, "the vault does not belong to the user");
        // The budget's principal on a budget's vault, else this user's and client's.
        const agentId = await store.principalForGrant(trx, {
          id: randomUUID(),
          userId: user.id,
          vaultId,
          clientKey: client?.clientId ?? "",
          displayName: client?.clientName ?? "Operator-issued grants",
          at: now,
        });
        const grant = await insertGrant(trx, {
          userId: user.id,
          clientId: client?.clientId ?? null,
          agentPrincipalId: agentId,
          vaultId,
          scopes,
          stepUp: req.stepUp,
          authTime: req.stepUp ? now : null,
        }, refresh);
        await audit(trx, ctx, { actor: "admin", action: "grant.issue", subject: grant.id });
        return grant;
      });
      return { token: signToken(g, refresh.token) };
    },

    async registerClient(req, ctx) {
      // Before the metadata and the scrypt: a flood costs one upsert per request.
      // Per client address a gateway vouched for (kClientAddress); every direct caller
      // shares the "" bucket, so forging an address escapes nothing.
      const limit = await deps.rateLimits.hit(`oauth-register:${ctx.values.get(kClientAddress)}`, deps.registrationLimitPerMinute, 60, deps.clock());
      if (!limit.allowed) fail(Reason.RATE_LIMITED, "too many client registrations from this address", { retryAfterSeconds: 60 });
      const meta = checkClientMetadata(req);
      const clientSecret = `ags_${randomBytes(32).toString("base64url")}`;
      const secretHash = await deps.secrets.hash(clientSecret);
      const record: ClientRecord = { ...meta, clientId: `agc_${randomBytes(12).toString("hex")}`, secretHash, createdAt: deps.clock() };
      await db.transaction(async (trx) => {
        const { inserted } = await store.insertClient(trx, record);
        if (!inserted) fail(Reason.INTERNAL, "could not allocate a client id");
        await audit(trx, ctx, { actor: "anonymous", action: "oauth.client.register", subject: record.clientId });
      });
      return { client: clientInit(record), clientSecret };
    },

    async checkAuthorization(req) {
      const r = await checkAuthorization(req);
      return {
        client: clientInit(r.client),
        scopes: r.scopes,
        vaultId: r.vaultId,
        stepUpRequired: r.stepUpRequired,
        vaults: r.vaults,
        stepUpFresh: r.stepUpFresh,
      };
    },

    async approveAuthorization(req, ctx) {
      if (!req.request) fail(Reason.INVALID_REQUEST, "request is required");
      const r = await checkAuthorization({ ...req.request, sessionToken: req.sessionToken });
      // checkAuthorization verified the client and its redirect URI: refusals may go back to it.
      const verified = { redirectUriVerified: true };
      const s = r.session ?? fail(Reason.ACCESS_DENIED, "sign in first", verified);
      const vaultId = (r.vaultId || req.vaultId).toLowerCase();
      if (!vaultId || !r.vaults.some((v) => v.vaultId === vaultId)) fail(Reason.INVALID_TARGET, "choose one of your vaults", verified);
      if (r.stepUpRequired && !r.stepUpFresh) fail(Reason.ACCESS_DENIED, "step-up is required to approve these scopes", verified);
      const code = `vgc_${randomBase64url(32)}`;
      const now = deps.clock();
      await db.transaction(async (trx) => {
        // A metadata-document client gets (or refreshes) its row: codes and grants refer to it.
        if (r.client.metadataDocument) await store.upsertDocumentClient(trx, r.client);
        const dead = await deadBudgetVault(trx, vaultId);
        if (dead) fail(Reason.INVALID_TARGET, dead);
        // Still the user's, and held until the code is inserted (a budget cleanup may delete it).
        if ((await store.vaultOwner(trx, vaultId, true)) !== s.userId) fail(Reason.INVALID_TARGET, "choose one of your vaults", verified);
        // On a budget's vault the code acts as the budget; elsewhere as the principal of this
        // user and client, created on first consent. The exchange copies it to the grant.
        const agentPrincipalId = await store.principalForGrant(trx, {
          id: randomUUID(),
          userId: s.userId,
          vaultId,
          clientKey: r.client.clientId,
          displayName: r.client.clientName,
          at: now,
        });
        await store.insertCode(trx, {
          codeHash: sha256Hex(code),
          clientId: r.client.clientId,
          userId: s.userId,
          agentPrincipalId,
          vaultId,
          scopes: r.scopes,
          redirectUri: req.request!.redirectUri,
          codeChallenge: req.request!.codeChallenge,
          stepUp: r.stepUpFresh,
          authTime: r.stepUpFresh ? s.stepUpAt : null,
          expiresAt: new Date(now.getTime() + CODE_TTL_MS),
          consumedAt: null,
          grantId: null,
          // RFC 8707: the exact MCP resources asked for become part of the token's audience.
          audiences: [...new Set(req.request!.resources.filter((x) => mcpResources.has(x) && x !== deps.mcpUrl))],
        });
        await audit(trx, ctx, { actor: `user:${s.userId}`, action: "oauth.consent", subject: r.client.clientId });
      });
      return { code, issuer: deps.issuer };
    },

    async exchangeCode(req, ctx) {
      const client = await authenticateClient(ctx, req.clientId, req.clientSecret);
      const now = deps.clock();
      const refresh = randomRefresh();
      if (req.code && /^[A-Za-z0-9._~-]{43,128}$/.test(req.codeVerifier) && req.resources.every((r) => mcpResources.has(r))) {
        const id = uuidv7();
        const issued = await store.exchangeCodeFast(
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
          { requestId: requestId(ctx), actor: `client:${client.clientId}`, action: "oauth.code_exchange" },
        );
        if (issued) return { token: signToken(issued, refresh.token) };
      }
      // Anything else (replay, expiry, mismatch, a vault resource) is decided under a lock.
      const outcome = await db.transaction(async (trx) => {
        const c = req.code ? await store.lockCode(trx, sha256Hex(req.code)) : undefined;
        if (!c || c.clientId !== client.clientId) return { kind: "invalid" as const, why: "unknown code" };
        if (c.consumedAt) {
          // RFC 6749 4.1.2: a code used twice revokes what it issued.
          const issued = c.grantId ? await store.findGrant(trx, c.grantId) : undefined;
          if (issued) await store.revokeLineage(trx, issued.lineageId, now, "code_replay");
          await audit(trx, ctx, { actor: `client:${client.clientId}`, action: "oauth.code_replay", subject: c.grantId ?? "", outcome: "failure", reason: "code_replay" });
          return { kind: "invalid" as const, why: "replayed code" };
        }
        if (c.expiresAt.getTime() <= now.getTime()) return { kind: "invalid" as const, why: "expired code" };
        if (c.redirectUri !== req.redirectUri) return { kind: "invalid" as const, why: "redirect_uri mismatch" };
        if (!/^[A-Za-z0-9._~-]{43,128}$/.test(req.codeVerifier)) return { kind: "invalid" as const, why: "malformed code_verifier" };
        const computed = sha256Base64url(req.codeVerifier);
        if (!constantTimeEqual(computed, c.codeChallenge)) return { kind: "invalid" as const, why: "PKCE mismatch" };
        for (const resource of req.resources) {
          if (!mcpResources.has(resource) && resource !== vaultUrnPrefix + c.vaultId) return { kind: "target" as const };
        }
        // RFC 6749 5.2 invalid_grant for an account that is no longer active; the code is not consumed.
        if ((await store.findUser(trx, c.userId))?.status !== "active") return { kind: "invalid" as const, why: "user inactive" };
        // A budget closed or declined since the consent: nothing is issued, the code stays unused.
        const dead = await deadBudgetVault(trx, c.vaultId);
        if (dead) return { kind: "dead" as const, why: dead };
        const g = await insertGrant(trx, {
          userId: c.userId,
          clientId: client.clientId,
          agentPrincipalId: c.agentPrincipalId,
          vaultId: c.vaultId,
          scopes: c.scopes,
          stepUp: c.stepUp,
          authTime: c.authTime,
          audiences: c.audiences,
        }, refresh);
        await store.consumeCode(trx, c.codeHash, g.id, now);
        await audit(trx, ctx, { actor: `client:${client.clientId}`, action: "oauth.code_exchange", subject: g.id });
        return { kind: "issued" as const, grant: g };
      });
      if (outcome.kind === "target") fail(Reason.INVALID_TARGET, "resource does not match the authorization");
      if (outcome.kind === "dead") fail(Reason.INVALID_GRANT, `the authorization code cannot be used: ${outcome.why}`);
      // One generic answer; the reason stays in the cause (oidc-provider's pkce.js habit).
      if (outcome.kind === "invalid") fail(Reason.INVALID_GRANT, "the authorization code is invalid, expired or already used", {}, outcome.why);
      return { token: signToken(outcome.grant, refresh.token) };
    },

    async revokeToken(req, ctx) {
      const client = await authenticateClient(ctx, req.clientId, req.clientSecret);
      let grant: GrantRecord | undefined;
      if (req.token.startsWith("vgr_")) grant = await store.findGrantByRefresh(db, sha256Hex(req.token));
      else {
        const claims = await verifier.verify(req.token);
        grant = claims ? await store.findGrant(db, claims.jti) : undefined;
      }
      // RFC 7009 2.2: an unknown or already invalid token is not an error.
      if (!grant) return {};
      if (grant.clientId !== client.clientId) fail(Reason.INVALID_REQUEST, "the token was not issued to this client");
      await db.transaction(async (trx) => {
        await store.revokeLineage(trx, grant.lineageId, deps.clock(), "client_revocation");
        await audit(trx, ctx, { actor: `client:${client.clientId}`, action: "oauth.revoke", subject: grant.id });
      });
      return {};
    },

    async startSignIn(req, ctx) {
      const now = deps.clock();
      const id = randomUUID();
      const code = String(randomInt(0, 1_000_000)).padStart(6, "0");
      let userId: string | null = null;
      let sessionId: string | null = null;
      let email: string;
      if (req.sessionToken) {
        const s = await session(req.sessionToken);
        userId = s.userId;
        sessionId = s.sessionId;
        email = normaliseEmail(s.email) ?? s.email;
      } else {
        email = normaliseEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "enter a valid e-mail address");
        const user = await store.findUserByEmail(db, email);
        // Unknown or inactive addresses get a challenge that can never succeed, and no
        // message; they are limited exactly like known ones.
        userId = user && user.status === "active" ? user.id : null;
      }
      const purpose = sessionId ? "step_up" : "sign_in";
      const gapKey = `otp-send-gap:${purpose}:${email}`;
      const gap = await deps.rateLimits.hit(gapKey, 1, OTP_SEND_GAP_SECONDS, now);
      const limit = gap.allowed ? await deps.rateLimits.hit(`otp-send:${email}`, OTP_SENDS_PER_HOUR, 3600, now) : gap;
      if (!limit.allowed) {
        // Nothing was sent: the 30 s gap does not start.
        if (gap.allowed) await deps.rateLimits.release(gapKey, now);
        fail(Reason.RATE_LIMITED, `${gap.allowed ? "too many codes were sent to this address" : "a code was sent to this address moments ago"}; try again in ${waitText(limit.retryAfterSeconds)}`, {
          retryAfterSeconds: limit.retryAfterSeconds,
        });
      }
      await db.transaction(async (trx) => {
        await store.insertChallenge(trx, {
          id,
          userId,
          sessionId,
          purpose,
          account: email,
          codeHash: hashCode(id, code),
          attempts: 0,
          createdAt: now,
          expiresAt: new Date(now.getTime() + OTP_TTL_MS),
          consumedAt: null,
        });
        if (userId) {
          const what = sessionId ? "confirm (step-up)" : "sign in to";
          await mail(trx, {
            email,
            subject: `Your Vaultgate code: ${code}`,
            body: `Use ${code} to ${what} Vaultgate. It expires in 10 minutes. If you did not ask for it, ignore this message.`,
            at: now,
          });
          await audit(trx, ctx, { actor: `user:${userId}`, action: sessionId ? "web.step_up.start" : "web.sign_in.start", subject: id });
        }
      });
      // The code itself never reaches a log line; `vaultgate dev outbox` shows it.
      if (userId) deps.logger.info({ challenge: id }, "dev outbox: a one-time code was queued; run `vaultgate dev outbox --email <address>`");
      return { challengeId: id };
    },

    async completeSignIn(req, ctx) {
      if (!UUID.test(req.challengeId)) fail(Reason.INVALID_GRANT, "the code is invalid or expired");
      const now = deps.clock();
      const stepUpSession = req.sessionToken ? await session(req.sessionToken) : undefined;
      const found = await store.findChallenge(db, req.challengeId);
      if (!found?.account) fail(Reason.INVALID_GRANT, "the code is invalid or expired");
      // A slot among the account's wrong codes is taken before the code is compared, so
      // concurrent guesses can never check more than the limit; a guess that turns out not
      // to be wrong gives its slot back.
      const account = found.account;
      const slotKey = `otp-wrong:${account}`;
      const slot = await deps.rateLimits.hit(slotKey, OTP_WRONG_PER_ACCOUNT, OTP_WRONG_WINDOW_SECONDS, now);
      if (!slot.allowed) {
        fail(Reason.RATE_LIMITED, `too many wrong codes were entered for this account; code sign-in is paused for ${waitText(slot.retryAfterSeconds)}`, {
          retryAfterSeconds: slot.retryAfterSeconds,
        });
      }
      const outcome = await db.transaction(async (trx) => {
        const c = await store.lockChallenge(trx, req.challengeId);
        if (!c || c.consumedAt || c.expiresAt.getTime() <= now.getTime() || c.attempts >= OTP_MAX_ATTEMPTS) return { ok: false as const, wrong: false };
        if ((c.purpose === "step_up") !== Boolean(stepUpSession) || (stepUpSession && stepUpSession.sessionId !== c.sessionId)) return { ok: false as const, wrong: false };
        await store.countAttempt(trx, c.id);
        if (!c.userId || !constantTimeEqual(hashCode(c.id, req.code.trim()), c.codeHash)) return { ok: false as const, wrong: true, userId: c.userId };
        await store.consumeChallenge(trx, c.id, now);
        if (stepUpSession) {
          await store.setStepUp(trx, stepUpSession.sessionId, now);
          await audit(trx, ctx, { actor: `user:${c.userId}`, action: "web.step_up" });
          return { ok: true as const, token: "" };
        }
        const token = `vgs_${randomBytes(32).toString("base64url")}`;
        await store.insertSession(trx, { id: randomUUID(), tokenHash: sha256Hex(token), userId: c.userId, at: now, expiresAt: new Date(now.getTime() + SESSION_TTL_MS) });
        await audit(trx, ctx, { actor: `user:${c.userId}`, action: "web.sign_in" });
        return { ok: true as const, token };
      }).catch(async (err: unknown) => {
        await deps.rateLimits.release(slotKey, now).catch(() => {});
        throw err;
      });
      if (!outcome.wrong) await deps.rateLimits.release(slotKey, now);
      if (!outcome.ok) {
        // The wrong code that filled the window tells the account holder, once per lockout.
        if (outcome.wrong && outcome.userId && slot.count >= OTP_WRONG_PER_ACCOUNT) {
          const ends = (await deps.rateLimits.windowEnd(slotKey, OTP_WRONG_WINDOW_SECONDS)) ?? new Date(now.getTime() + OTP_WRONG_WINDOW_SECONDS * 1000);
          const until = ends.toISOString().slice(11, 16);
          await mail(db, {
            email: account,
            subject: "Vaultgate: code sign-in paused",
            body: `Someone tried codes for your account; code sign-in is paused until ${until} UTC. If it was not you, your account is safe: no code was accepted, and you can sign in again after that time.`,
            at: now,
          });
          deps.logger.warn({ user: outcome.userId }, "code sign-in paused for an account after too many wrong codes");
        }
        fail(Reason.INVALID_GRANT, "the code is invalid or expired");
      }
      return { sessionToken: outcome.token, expiresIn: outcome.token ? BigInt(SESSION_TTL_MS / 1000) : 0n };
    },

    async getSession(req) {
      const s = await session(req.sessionToken);
      return {
        session: {
          userId: s.userId,
          email: s.email,
          stepUpAt: s.stepUpAt ? BigInt(Math.floor(s.stepUpAt.getTime() / 1000)) : 0n,
          stepUpFresh: s.stepUpFresh,
        },
      };
    },

    async endSession(req) {
      // Like every session RPC, only the holder of a live session may end it.
      await session(req.sessionToken);
      await store.endSession(db, sha256Hex(req.sessionToken), deps.clock());
      return {};
    },

    async listAgents(req) {
      const s = await session(req.sessionToken);
      const agents = await store.agentsOfUser(db, s.userId);
      return {
        agents: agents.map((a) => ({
          agentId: a.agentId,
          displayName: a.displayName,
          clientId: a.clientId,
          activeGrants: a.grants.filter((g) => g.state === "active").length,
          grants: a.grants.filter((g) => g.state === "active").map(grantSummary),
        })),
      };
    },

    async getAgent(req) {
      const s = await session(req.sessionToken);
      if (!UUID.test(req.agentId)) fail(Reason.NOT_FOUND, "no such agent");
      const [a] = await store.agentsOfUser(db, s.userId, req.agentId.toLowerCase());
      if (!a) fail(Reason.NOT_FOUND, "no such agent");
      return {
        agent: {
          agentId: a.agentId,
          displayName: a.displayName,
          clientId: a.clientId,
          activeGrants: a.grants.filter((g) => g.state === "active").length,
          grants: a.grants.map(grantSummary),
        },
      };
    },

    async revokeUserGrant(req, ctx) {
      const s = await session(req.sessionToken);
      if (!UUID.test(req.grantId)) fail(Reason.NOT_FOUND, "no such grant");
      const g = await store.findGrant(db, req.grantId.toLowerCase());
      if (!g || g.userId !== s.userId) fail(Reason.NOT_FOUND, "no such grant");
      const revoked = await db.transaction(async (trx) => {
        const n = await store.revokeLineage(trx, g.lineageId, deps.clock(), "user_revocation");
        await audit(trx, ctx, { actor: `user:${s.userId}`, action: "grant.revoke", subject: g.id });
        return n;
      });
      return { revoked };
    },

    async killSwitch(req, ctx) {
      const s = await session(req.sessionToken);
      const revoked = await db.transaction(async (trx) => {
        const n = await store.revokeAllOfUser(trx, s.userId, deps.clock(), "kill_switch");
        await audit(trx, ctx, { actor: `user:${s.userId}`, action: "killSwitch.all", subject: s.userId });
        return n;
      });
      return { revoked };
    },

    async listOutbox(req) {
      const email = req.email ? normaliseEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "email must be an e-mail address") : undefined;
      const rows = await store.listOutbox(db, email);
      return { messages: rows.map((m) => ({ email: m.email, subject: unseal(m.subject), body: unseal(m.body), createdAt: m.createdAt.toISOString() })) };
    },
  };
}

/** "25 seconds" below two minutes, else whole minutes. */
function waitText(seconds: number): string {
  if (seconds < 120) return `${seconds} second${seconds === 1 ? "" : "s"}`;
  const minutes = Math.ceil(seconds / 60);
  return `${minutes} minutes`;
}
