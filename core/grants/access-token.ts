import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Keyring } from "../keys/keyring.js";
import { MAX_TOKEN_LIFETIME_SECONDS } from "../keys/lifecycle.js";
import { decodeJwt } from "jose";
import { cachedAccessTokenCheck, checkAccessToken, type CheckedClaims } from "../keys/access-token-verifier.js";

/** Agent grant access tokens live as long as any keyring token may. */
export const ACCESS_TOKEN_TTL_SECONDS = MAX_TOKEN_LIFETIME_SECONDS;

export const AGENT_TOKEN_HEADER = Object.freeze({ typ: "at+jwt" } as const);

export interface AgentTokenClaims {
  iss: string;
  /** MCP_URL first, the exact MCP resources the client asked for, then the vault URN. */
  aud: string[];
  sub: string;
  client_id: string;
  act: { sub: string };
  vault_id: string;
  scope: string;
  jti: string;
  iat: number;
  nbf: number;
  exp: number;
  acr?: "step-up";
  auth_time?: number;
}

/** The agent access-token claims of one grant; iat comes from the grant so a re-sign yields the same token claims. */
export function agentTokenClaims(g: {
  issuer: string;
  mcpUrl: string;
  vaultUrn: string;
  userId: string;
  clientId: string;
  agentId: string;
  vaultId: string;
  scopes: string[];
  grantId: string;
  issuedAt: Date;
  authTime: Date | null;
  /** Exact MCP resources the client asked for (RFC 8707), besides mcpUrl. */
  audiences?: readonly string[];
}): AgentTokenClaims {
  const iat = Math.floor(g.issuedAt.getTime() / 1000);
  const claims: AgentTokenClaims = {
    iss: g.issuer,
    aud: [g.mcpUrl, ...(g.audiences ?? []).filter((a) => a !== g.mcpUrl), g.vaultUrn],
    sub: g.userId,
    client_id: g.clientId,
    act: { sub: g.agentId },
    vault_id: g.vaultId,
    scope: g.scopes.join(" "),
    jti: g.grantId,
    iat,
    nbf: iat,
    exp: iat + ACCESS_TOKEN_TTL_SECONDS,
  };
  if (g.authTime) {
    claims.acr = "step-up";
    claims.auth_time = Math.floor(g.authTime.getTime() / 1000);
  }
  return claims;
}

export interface AccessTokenVerifierOptions {
  keyring: Keyring;
  issuer: string;
  mcpUrl: string;
  clock: () => Date;
}

/**
 * Verifies agent access tokens with the keyring's one cached token check, and refuses a token
 * whose claims are not the agent token's. Grant state is the caller's to check.
 */
export function createAccessTokenVerifier(options: AccessTokenVerifierOptions) {
  const rules = { keyring: options.keyring, issuer: options.issuer, audience: options.mcpUrl, maxLength: 8192 };
  const check = cachedAccessTokenCheck({ ...rules, read: agentClaims });

  /**
   * The claims of a valid, unexpired agent token, or undefined; AUTH_UNAVAILABLE when the keys
   * are unusable, so a server-side key problem never reads as the agent's bad token. Grant state is not checked here.
   */
  async function verify(token: string): Promise<AgentTokenClaims | undefined> {
    const checked = await check(token, options.clock());
    if (checked.ok) return checked.value;
    if (checked.refusal === "no_keys") fail(Reason.AUTH_UNAVAILABLE, "token verification is unavailable");
    return undefined;
  }

  return {
    verify,
    /**
     * verify, but a token that only expired still counts, checked as at its iat: a revocation names a
     * lineage by any of its tokens. Its key must still verify a token issued then (the keyring decides now).
     */
    async verifyEvenIfExpired(token: string): Promise<AgentTokenClaims | undefined> {
      const live = await verify(token);
      if (live) return live;
      const iat = issuedAtOf(token);
      if (iat === undefined) return undefined;
      const checked = await checkAccessToken(token, rules, new Date(iat * 1000));
      return checked.ok ? agentClaims(checked.claims) : undefined;
    },
  };
}

/** The unverified iat of a compact JWT, or undefined; checkAccessToken then verifies the token as at that time. */
function issuedAtOf(token: string): number | undefined {
  try {
    const { iat } = decodeJwt(token);
    return isInt(iat) ? iat : undefined;
  } catch {
    return undefined;
  }
}

const isString = (v: unknown): v is string => typeof v === "string";
const isInt = (v: unknown): v is number => Number.isSafeInteger(v);

/** The agent token claims as AgentTokenClaims declares them, or undefined for any other shape. */
function agentClaims(c: CheckedClaims): AgentTokenClaims | undefined {
  const { iss, aud, sub, client_id, act, vault_id, scope, jti, iat, nbf, exp, acr, auth_time } = c;
  if (!isString(iss) || !Array.isArray(aud) || !aud.every(isString) || !isString(sub) || !isString(client_id)) return undefined;
  const actor = typeof act === "object" && act !== null ? (act as { sub?: unknown }).sub : undefined;
  if (!isString(actor) || !isString(vault_id) || !isString(scope) || !isString(jti) || !isInt(nbf)) return undefined;
  if ((acr !== undefined && acr !== "step-up") || (auth_time !== undefined && !isInt(auth_time))) return undefined;
  const claims: AgentTokenClaims = { iss, aud, sub, client_id, act: { sub: actor }, vault_id, scope, jti, iat, nbf, exp };
  if (acr !== undefined) claims.acr = acr;
  if (auth_time !== undefined) claims.auth_time = auth_time;
  return claims;
}

export type AccessTokenVerifier = ReturnType<typeof createAccessTokenVerifier>;
