import { verify as verifySignature } from "node:crypto";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Keyring } from "../keys/keyring.js";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";
import { PARTNER_TOKEN_TTL_SECONDS } from "./token-claims.js";

export interface VerifiedPartnerToken {
  clientId: string;
  scopes: string[];
  jti: string;
  exp: number;
}

interface CachedToken {
  verified: VerifiedPartnerToken;
  kid: string;
  iat: number;
}

export interface PartnerTokenVerifierOptions {
  keyring: Keyring;
  issuer: string;
  audience: string;
  clock: () => Date;
  /** Verified tokens kept (until their exp) so a repeat costs no signature check. */
  cacheSize?: number;
}

export interface PartnerTokenVerifier {
  /** Fails INVALID_TOKEN for any bad token, AUTH_UNAVAILABLE when keys are unusable. */
  verify(token: string): Promise<VerifiedPartnerToken>;
}

const MAX_TOKEN_LENGTH = 4096;

/**
 * Verifies partner access tokens exactly as spec 5.2 / DESIGN 3 say: ES256 only,
 * `typ` at+jwt, `iss`, `aud`, `exp - iat <= 3600`, 30 s skew. Keys come from the
 * keyring, which alone decides whether a kid may verify a token issued at `iat`
 * (rotation, retirement); that is asked again on every call, cached tokens included.
 */
export function createPartnerTokenVerifier(options: PartnerTokenVerifierOptions): PartnerTokenVerifier {
  const cacheSize = options.cacheSize ?? 10_000;
  const cache = new Map<string, CachedToken>();

  function checkTimes(t: { exp: number; nbf?: number; iat: number }, nowSeconds: number) {
    if (nowSeconds > t.exp + CLOCK_SKEW_SECONDS) fail(Reason.INVALID_TOKEN, "the access token has expired");
    if (t.nbf !== undefined && t.nbf > nowSeconds + CLOCK_SKEW_SECONDS) fail(Reason.INVALID_TOKEN, "the access token is not yet valid");
    if (t.iat > nowSeconds + CLOCK_SKEW_SECONDS) fail(Reason.INVALID_TOKEN, "the access token is not yet valid");
  }

  return {
    async verify(token) {
      const nowSeconds = Math.floor(options.clock().getTime() / 1000);
      // spec 5.2: missing or malformed key configuration is 503, whatever the token.
      if (options.keyring.problem()) fail(Reason.AUTH_UNAVAILABLE, "token verification is unavailable");

      const cached = cache.get(token);
      if (cached) {
        if (nowSeconds > cached.verified.exp + CLOCK_SKEW_SECONDS) {
          cache.delete(token);
          fail(Reason.INVALID_TOKEN, "the access token has expired");
        }
        if (!(await options.keyring.verificationKey(cached.kid, cached.iat))) {
          cache.delete(token);
          fail(Reason.INVALID_TOKEN, "the access token is invalid");
        }
        return cached.verified;
      }

      if (token.length > MAX_TOKEN_LENGTH) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      const parts = token.split(".");
      if (parts.length !== 3) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      const [h, p, s] = parts as [string, string, string];
      const header = decodeJson(h);
      const claims = decodeJson(p);
      if (!header || !claims) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      // ES256 only (no "none", no HMAC confusion); RFC 9068 typ.
      if (header.alg !== "ES256") fail(Reason.INVALID_TOKEN, "the access token is invalid");
      if (typeof header.typ !== "string" || !["at+jwt", "application/at+jwt"].includes(header.typ.toLowerCase())) {
        fail(Reason.INVALID_TOKEN, "the access token is invalid");
      }
      if (typeof header.kid !== "string") fail(Reason.INVALID_TOKEN, "the access token is invalid");
      const kid = header.kid;
      if (!isInt(claims.iat)) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      const key = await options.keyring.verificationKey(kid, claims.iat);
      if (!key) {
        // No usable published key at all is a configuration problem, not a bad token.
        if (!options.keyring.hasVerificationKeys()) fail(Reason.AUTH_UNAVAILABLE, "token verification is unavailable");
        fail(Reason.INVALID_TOKEN, "the access token is invalid");
      }
      const signature = Buffer.from(s, "base64url");
      const ok = signature.length === 64 && verifySignature("sha256", Buffer.from(`${h}.${p}`), { key, dsaEncoding: "ieee-p1363" }, signature);
      if (!ok) fail(Reason.INVALID_TOKEN, "the access token is invalid");

      if (claims.iss !== options.issuer) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      const aud = claims.aud;
      if (!(aud === options.audience || (Array.isArray(aud) && aud.includes(options.audience)))) {
        fail(Reason.INVALID_TOKEN, "the access token is invalid");
      }
      const { exp, iat, nbf, sub, client_id: clientId, scope, jti } = claims;
      if (!isInt(exp) || !isInt(iat) || (nbf !== undefined && !isInt(nbf))) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      // DESIGN 3: a token claiming a longer life than one hour is refused outright.
      if (exp - iat > PARTNER_TOKEN_TTL_SECONDS || exp < iat) fail(Reason.INVALID_TOKEN, "the access token is invalid");
      if (typeof sub !== "string" || sub === "" || clientId !== sub || typeof scope !== "string" || typeof jti !== "string") {
        fail(Reason.INVALID_TOKEN, "the access token is invalid");
      }
      checkTimes({ exp, iat, nbf: nbf as number | undefined }, nowSeconds);

      const verified: VerifiedPartnerToken = { clientId: sub, scopes: scope === "" ? [] : scope.split(" "), jti, exp };
      if (cache.size >= cacheSize) cache.delete(cache.keys().next().value!);
      cache.set(token, { verified, kid, iat });
      return verified;
    },
  };
}

function decodeJson(part: string): Record<string, unknown> | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(part)) return undefined;
  try {
    const v: unknown = JSON.parse(Buffer.from(part, "base64url").toString("utf8"));
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function isInt(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v);
}
