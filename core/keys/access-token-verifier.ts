import { errors, jwtVerify, type JWTPayload } from "jose";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";
import type { Keyring } from "./keyring.js";
import { MAX_TOKEN_LIFETIME_SECONDS } from "./lifecycle.js";

/** Why a token was refused; each room words its own answer. */
export type TokenRefusal = "expired" | "not_yet_valid" | "invalid" | "no_keys";

export interface CheckedClaims extends JWTPayload {
  iat: number;
  exp: number;
}

export type TokenCheck = { ok: true; claims: CheckedClaims; kid: string } | { ok: false; refusal: TokenRefusal };

export interface AccessTokenRules {
  keyring: Pick<Keyring, "verificationKey" | "hasVerificationKeys">;
  issuer: string;
  audience: string;
  /** Longer tokens are refused unread. */
  maxLength: number;
  /** The header typ (also as application/<typ>, any case); default at+jwt, so no other JWT of ours passes. */
  typ?: string;
  /** The longest `exp - iat`; default MAX_TOKEN_LIFETIME_SECONDS. */
  maxLifetimeSeconds?: number;
}

class Refused extends Error {
  constructor(readonly refusal: TokenRefusal) {
    super(refusal);
  }
}

/**
 * The one check of the JWTs the keyring signs (access tokens; sign-out handoffs by their own typ and lifetime):
 * ES256, typ, issuer, audience, integer times, `exp - iat` within the longest lifetime and the clock skew on
 * exp, nbf and iat. The keyring decides whether a kid may verify a token issued at `iat`.
 */
export async function checkAccessToken(token: string, rules: AccessTokenRules, now: Date): Promise<TokenCheck> {
  if (token.length > rules.maxLength) return { ok: false, refusal: "invalid" };
  const typ = (rules.typ ?? "at+jwt").toLowerCase();
  const maxLifetime = rules.maxLifetimeSeconds ?? MAX_TOKEN_LIFETIME_SECONDS;
  let kid = "";
  try {
    const { payload } = await jwtVerify(
      token,
      async (header, jws) => {
        // Checked before the key is looked up, so a malformed token never reads as a key problem.
        if (typeof header.typ !== "string" || ![typ, `application/${typ}`].includes(header.typ.toLowerCase())) throw new Refused("invalid");
        if (typeof header.kid !== "string") throw new Refused("invalid");
        const claims = decodeClaims(typeof jws.payload === "string" ? jws.payload : "");
        if (!claims || !isInt(claims.iat) || !isInt(claims.exp) || (claims.nbf !== undefined && !isInt(claims.nbf))) throw new Refused("invalid");
        if (claims.exp < claims.iat || claims.exp - claims.iat > maxLifetime) throw new Refused("invalid");
        const key = await rules.keyring.verificationKey(header.kid, claims.iat);
        if (!key) throw new Refused(rules.keyring.hasVerificationKeys() ? "invalid" : "no_keys");
        kid = header.kid;
        return key;
      },
      {
        algorithms: ["ES256"],
        typ,
        issuer: rules.issuer,
        audience: rules.audience,
        clockTolerance: CLOCK_SKEW_SECONDS,
        maxTokenAge: maxLifetime,
        currentDate: now,
      },
    );
    return { ok: true, claims: payload as CheckedClaims, kid };
  } catch (err) {
    if (err instanceof Refused) return { ok: false, refusal: err.refusal };
    if (err instanceof errors.JWTExpired) return { ok: false, refusal: "expired" };
    if (err instanceof errors.JWTClaimValidationFailed && (err.claim === "nbf" || err.claim === "iat") && err.reason === "check_failed") {
      return { ok: false, refusal: "not_yet_valid" };
    }
    return { ok: false, refusal: "invalid" };
  }
}

type CachedTimes = { iat: number; exp: number; nbf?: number | undefined };

/** The same time rules for a token verified before and kept in a cache. */
function timeRefusal(claims: CachedTimes, now: Date): TokenRefusal | undefined {
  const seconds = Math.floor(now.getTime() / 1000);
  if (claims.exp <= seconds - CLOCK_SKEW_SECONDS) return "expired";
  if (claims.iat > seconds + CLOCK_SKEW_SECONDS || (claims.nbf !== undefined && claims.nbf > seconds + CLOCK_SKEW_SECONDS)) return "not_yet_valid";
  return undefined;
}

export interface CachedTokenRules<T> extends AccessTokenRules {
  keyring: Pick<Keyring, "verificationKey" | "hasVerificationKeys" | "configurationProblem">;
  /** The room's claims of a token that passed, read once; undefined refuses the token as invalid. */
  read: (claims: CheckedClaims) => T | undefined;
  /** How many verified tokens are kept (default 10 000). */
  cacheSize?: number;
}

export type CachedTokenCheck<T> = { ok: true; value: T } | { ok: false; refusal: TokenRefusal };

/**
 * checkAccessToken behind a bounded cache, so a repeat skips the signature check: a cached token
 * meets the same time rules and key question again (a broken key configuration refuses all as `no_keys`); a
 * refused one leaves the cache, and a full cache drops its oldest.
 */
export function cachedAccessTokenCheck<T>(rules: CachedTokenRules<T>): (token: string, now: Date) => Promise<CachedTokenCheck<T>> {
  const cacheSize = rules.cacheSize ?? 10_000;
  const cache = new Map<string, { value: T; kid: string; times: CachedTimes }>();
  return async (token, now) => {
    if (rules.keyring.configurationProblem()) return { ok: false, refusal: "no_keys" };
    const cached = cache.get(token);
    if (cached) {
      const refusal = timeRefusal(cached.times, now) ?? ((await rules.keyring.verificationKey(cached.kid, cached.times.iat)) ? undefined : "invalid");
      if (refusal === undefined) return { ok: true, value: cached.value };
      cache.delete(token);
      return { ok: false, refusal };
    }
    const checked = await checkAccessToken(token, rules, now);
    if (!checked.ok) return checked;
    const value = rules.read(checked.claims);
    if (value === undefined) return { ok: false, refusal: "invalid" };
    const { iat, exp, nbf } = checked.claims;
    if (cache.size >= cacheSize && !cache.has(token)) cache.delete(cache.keys().next().value!);
    cache.set(token, { value, kid: checked.kid, times: { iat, exp, nbf } });
    return { ok: true, value };
  };
}

function decodeClaims(part: string): Record<string, unknown> | undefined {
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
