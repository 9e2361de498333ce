import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Knex } from "knex";
import type { TokenResponseSchema } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { KeyringError, type Keyring } from "../keys/keyring.js";
import { requireSigning } from "../keys/require-signing.js";
import { hmacSha256, sha256Hex } from "../../lib/crypto.js";
import { uuidv7 } from "../../lib/uuidv7.js";
import { randomBase64url } from "../../lib/random.js";
import { MCP_ENDPOINTS } from "../../lib/vocabulary.js";
import { ACCESS_TOKEN_TTL_SECONDS, AGENT_TOKEN_HEADER, agentTokenClaims } from "./access-token.js";
import type { GrantRecord, GrantsStore } from "./stores/grants.js";
import type { GrantVaultsStore } from "./stores/vaults.js";

export type TokenInit = MessageInitShape<typeof TokenResponseSchema>;

/** Authorization codes live 60 s. */
export const CODE_TTL_MS = 60_000;
/** Refresh tokens end 30 days after their grant was issued (a decision; docs/reference/agent-oauth.md). */
export const REFRESH_TTL_MS = 30 * 24 * 3600_000;
/** The client id in tokens of operator-issued grants (which have no OAuth client). */
export const OPERATOR_CLIENT = "operator";

/** Where tokens are issued for: the issuer, the MCP server and the vault URN namespace. */
export interface GrantAudience {
  issuer: string;
  mcpUrl: string;
  /** `urn:<ns>:vault:`, followed by the vault's id. */
  vaultUrnPrefix: string;
  /** The MCP server URL and its endpoints, as a client may name them (the URL also with a trailing slash), each to its canonical form. */
  mcpResources: ReadonlyMap<string, string>;
}

export function grantAudience(o: { issuer: string; mcpUrl: string; urnNamespace: string }): GrantAudience {
  return {
    issuer: o.issuer,
    mcpUrl: o.mcpUrl,
    vaultUrnPrefix: `urn:${o.urnNamespace}:vault:`,
    mcpResources: new Map([...[o.mcpUrl, ...MCP_ENDPOINTS.map((e) => o.mcpUrl + e.path)].map((r) => [r, r] as const), [`${o.mcpUrl}/`, o.mcpUrl] as const]),
  };
}

/** A refresh token to issue: the token itself (handed out once), and what is stored of it. */
export interface NewRefresh {
  token: string;
  hash: string | null;
  salt: string | null;
}

/** What a client that did not register the refresh_token grant type is issued: nothing to refresh with. */
export const NO_REFRESH: NewRefresh = { token: "", hash: null, salt: null };

/** A new lineage's refresh token, unless its client did not register that grant type (RFC 7591). */
export function firstRefresh(client: { grantTypes: readonly string[] } | undefined): NewRefresh {
  return !client || client.grantTypes.includes("refresh_token") ? randomRefresh() : NO_REFRESH;
}

/** A lineage's first refresh token (code exchange, IssueGrant, SupersedeGrant): 32 random bytes. */
export function randomRefresh(): NewRefresh {
  const token = `vgr_${randomBase64url(32)}`;
  return { token, hash: sha256Hex(token), salt: null };
}

/**
 * The successor token is HMAC(presented token, stored salt): the database never holds what could
 * mint a token, the presented token alone lacks the salt, and a grace-window retry gets the same one.
 */
export function derivedRefreshToken(presented: string, salt: string): string {
  return `vgr_${hmacSha256(presented, salt, "base64url")}`;
}

export function derivedRefresh(presented: string): NewRefresh & { hash: string; salt: string } {
  const salt = randomBase64url(32);
  const token = derivedRefreshToken(presented, salt);
  return { token, hash: sha256Hex(token), salt };
}

/**
 * The token response for a grant; the refresh token is the one issued with it (only its hash is stored).
 * `answeredAt` is set when an earlier grant is answered again: `expires_in` is then what its token has left.
 */
export async function signToken(
  deps: { keyring: Keyring; audience: GrantAudience },
  g: GrantRecord,
  refreshToken: string,
  answeredAt?: Date,
): Promise<TokenInit> {
  // A key another replica withdrew would sign a token every verifier refuses.
  await requireSigning(deps.keyring);
  const claims = agentTokenClaims({
    issuer: deps.audience.issuer,
    mcpUrl: deps.audience.mcpUrl,
    vaultUrn: deps.audience.vaultUrnPrefix + g.vaultId,
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
    expiresIn: BigInt(answeredAt ? remainingSeconds(claims.exp, answeredAt) : ACCESS_TOKEN_TTL_SECONDS),
    refreshToken,
    scope: claims.scope,
    jti: g.id,
  };
}

function remainingSeconds(exp: number, at: Date): number {
  return Math.min(ACCESS_TOKEN_TTL_SECONDS, Math.max(0, exp - Math.floor(at.getTime() / 1000)));
}

export type NewGrant = Pick<GrantRecord, "userId" | "clientId" | "agentPrincipalId" | "vaultId" | "scopes" | "stepUp" | "authTime"> & {
  /** Only a refresh that narrowed `scopes` sets it (GrantRecord.refreshScopes). */
  refreshScopes?: string[] | null;
  lineageId?: string;
  parentGrantId?: string;
  audiences?: string[];
};

/** Inserts an active grant (a new lineage unless `lineageId` is given) holding `refresh`'s hash. */
export async function insertGrant(
  deps: { grants: GrantsStore; clock: () => Date },
  trx: Knex.Transaction,
  g: NewGrant,
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
    refreshScopes: g.refreshScopes ?? null,
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
  await deps.grants.insertGrant(trx, record);
  return record;
}

/**
 * Why no grant may bind a vault whose budget has this status: only a draft or active budget's
 * vault, or one outside any budget (no status), may be bound; undefined when it may.
 */
export function deadBudgetStatus(status: string | null | undefined): string | undefined {
  if (status == null || status === "draft" || status === "active") return undefined;
  if (status === "closed") return "the vault belongs to a closed budget";
  if (status === "declined") return "the vault belongs to a budget its owner declined";
  return "the vault belongs to a budget whose creation did not complete";
}

/**
 * Why no grant may bind this vault (deadBudgetStatus, checked under the budget row's lock,
 * see lockBudgetStatusOfVault); undefined when one may.
 */
export async function deadBudgetVault(vaults: GrantVaultsStore, trx: Knex.Transaction, vaultId: string): Promise<string | undefined> {
  return deadBudgetStatus(await vaults.lockBudgetStatusOfVault(trx, vaultId));
}
