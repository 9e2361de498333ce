import type { JWK } from "jose";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";

/**
 * The longest life any token signed by the keyring may claim (`exp - iat`). Both
 * verifiers refuse longer claims (agent and partner tokens live exactly this long).
 */
export const MAX_TOKEN_LIFETIME_SECONDS = 3600;

/** How long a rotated key stays published: after that every token it signed has expired. */
export const ROTATED_KEY_GRACE_MS = (MAX_TOKEN_LIFETIME_SECONDS + CLOCK_SKEW_SECONDS) * 1000;

/** One row of signing_keys: a published public key and where it is in its life. */
export interface KeyState {
  kid: string;
  jwk: JWK;
  createdAt: Date;
  /** When a newer key replaced it; it then verifies only tokens issued up to this moment. */
  rotatedAt: Date | null;
  /** When the operator withdrew it; it then verifies nothing and is not published. */
  retiredAt: Date | null;
}

/** True while the key belongs in the JWKS. */
export function keyPublished(k: KeyState, now: Date): boolean {
  if (k.retiredAt) return false;
  return k.rotatedAt === null || now.getTime() <= k.rotatedAt.getTime() + ROTATED_KEY_GRACE_MS;
}

/**
 * The one rule both verifiers share: the key is published and, if rotated, the token's `iat` is no
 * later than the rotation, with no skew, because the rotating process signs with the new key at once.
 */
export function keyVerifiesTokenIssuedAt(k: KeyState, iat: number, now: Date): boolean {
  if (!keyPublished(k, now)) return false;
  return k.rotatedAt === null || iat * 1000 <= k.rotatedAt.getTime();
}
