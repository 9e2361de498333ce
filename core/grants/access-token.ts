import { verify as verifySignature } from "node:crypto";
import type { Keyring } from "../keys/keyring.js";
import { MAX_TOKEN_LIFETIME_SECONDS } from "../keys/lifecycle.js";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";

/** DESIGN 3: agent grant access tokens live 3600 s; verification allows 30 s of skew. */
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

/** Claims of DESIGN 3 for one grant; iat comes from the grant so a re-sign yields the same token claims. */
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
 * Verifies agent access tokens with node:crypto (DESIGN 7: about 3x jose). The
 * signature check of a given token is done once and cached; whether its key may still
 * verify it (rotation, retirement: keyring.verificationKey), time and grant state are
 * checked on every call.
 */
export function createAccessTokenVerifier(options: AccessTokenVerifierOptions) {
  const verified = new Map<string, { claims: AgentTokenClaims; kid: string }>();
  const MAX_CACHED = 10_000;

  async function verifySigned(token: string): Promise<AgentTokenClaims | undefined> {
    const cached = verified.get(token);
    if (cached) return (await options.keyring.verificationKey(cached.kid, cached.claims.iat)) ? cached.claims : undefined;
    const parts = token.split(".");
    if (parts.length !== 3 || token.length > 8192) return undefined;
    let header: Record<string, unknown>;
    let payload: AgentTokenClaims;
    try {
      header = JSON.parse(Buffer.from(parts[0]!, "base64url").toString("utf8"));
      payload = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8"));
    } catch {
      return undefined;
    }
    if (!header || typeof header !== "object" || header.alg !== "ES256" || header.typ !== "at+jwt" || typeof header.kid !== "string") return undefined;
    if (typeof payload !== "object" || payload === null || !Number.isSafeInteger(payload.iat)) return undefined;
    const key = await options.keyring.verificationKey(header.kid, payload.iat);
    if (!key) return undefined;
    const ok = verifySignature("sha256", Buffer.from(`${parts[0]}.${parts[1]}`), { key, dsaEncoding: "ieee-p1363" }, Buffer.from(parts[2]!, "base64url"));
    if (!ok) return undefined;
    if (verified.size >= MAX_CACHED) verified.clear();
    verified.set(token, { claims: payload, kid: header.kid });
    return payload;
  }

  return {
    /** The claims of a valid, unexpired agent token, or undefined. Grant state is not checked here. */
    async verify(token: string): Promise<AgentTokenClaims | undefined> {
      const c = await verifySigned(token);
      if (!c) return undefined;
      const now = Math.floor(options.clock().getTime() / 1000);
      if (c.iss !== options.issuer) return undefined;
      if (!Array.isArray(c.aud) || !c.aud.includes(options.mcpUrl)) return undefined;
      if (typeof c.exp !== "number" || typeof c.iat !== "number" || typeof c.jti !== "string") return undefined;
      // DESIGN 3: maximum lifetime one hour, 30 s skew.
      if (c.exp - c.iat > ACCESS_TOKEN_TTL_SECONDS) return undefined;
      if (now > c.exp + CLOCK_SKEW_SECONDS) return undefined;
      if (c.iat > now + CLOCK_SKEW_SECONDS || (typeof c.nbf === "number" && c.nbf > now + CLOCK_SKEW_SECONDS)) return undefined;
      return c;
    },
  };
}

export type AccessTokenVerifier = ReturnType<typeof createAccessTokenVerifier>;
