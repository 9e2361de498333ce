import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Keyring } from "../keys/keyring.js";
import { checkAccessToken, timeRefusal } from "../keys/access-token-verifier.js";

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

const REFUSALS = {
  expired: "the access token has expired",
  not_yet_valid: "the access token is not yet valid",
  invalid: "the access token is invalid",
} as const;

/**
 * Verifies partner access tokens with the keyring's one token check, then the partner
 * claims (sub = client_id, scope, jti). Whether the kid may still verify the token is
 * asked again on every call, cached tokens included.
 */
export function createPartnerTokenVerifier(options: PartnerTokenVerifierOptions): PartnerTokenVerifier {
  const cacheSize = options.cacheSize ?? 10_000;
  const cache = new Map<string, CachedToken>();
  const rules = { keyring: options.keyring, issuer: options.issuer, audience: options.audience, maxLength: MAX_TOKEN_LENGTH };

  return {
    async verify(token) {
      const now = options.clock();
      // Missing or malformed key configuration is 503, whatever the token.
      if (options.keyring.problem()) fail(Reason.AUTH_UNAVAILABLE, "token verification is unavailable");

      const cached = cache.get(token);
      if (cached) {
        if (timeRefusal({ iat: cached.iat, exp: cached.verified.exp }, now) === "expired") {
          cache.delete(token);
          fail(Reason.INVALID_TOKEN, REFUSALS.expired);
        }
        if (!(await options.keyring.verificationKey(cached.kid, cached.iat))) {
          cache.delete(token);
          fail(Reason.INVALID_TOKEN, REFUSALS.invalid);
        }
        return cached.verified;
      }

      const checked = await checkAccessToken(token, rules, now);
      if (!checked.ok) {
        if (checked.refusal === "no_keys") fail(Reason.AUTH_UNAVAILABLE, "token verification is unavailable");
        fail(Reason.INVALID_TOKEN, REFUSALS[checked.refusal]);
      }
      const { sub, client_id: clientId, scope, jti, exp, iat } = checked.claims;
      if (typeof sub !== "string" || sub === "" || clientId !== sub || typeof scope !== "string" || typeof jti !== "string") {
        fail(Reason.INVALID_TOKEN, REFUSALS.invalid);
      }

      const verified: VerifiedPartnerToken = { clientId: sub, scopes: scope === "" ? [] : scope.split(" "), jti, exp };
      if (cache.size >= cacheSize) cache.delete(cache.keys().next().value!);
      cache.set(token, { verified, kid: checked.kid, iat });
      return verified;
    },
  };
}
