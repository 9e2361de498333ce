import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Keyring } from "../keys/keyring.js";
import { cachedAccessTokenCheck, type CheckedClaims } from "../keys/access-token-verifier.js";

export interface VerifiedPartnerToken {
  clientId: string;
  scopes: string[];
  jti: string;
  exp: number;
}

export interface PartnerTokenVerifierOptions {
  keyring: Keyring;
  issuer: string;
  audience: string;
  clock: () => Date;
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
 * Verifies partner access tokens with the keyring's one cached token check, then the partner
 * claims (sub = client_id, scope, jti).
 */
export function createPartnerTokenVerifier(options: PartnerTokenVerifierOptions): PartnerTokenVerifier {
  const check = cachedAccessTokenCheck({
    keyring: options.keyring,
    issuer: options.issuer,
    audience: options.audience,
    maxLength: MAX_TOKEN_LENGTH,
    read: partnerClaims,
  });

  return {
    async verify(token) {
      const checked = await check(token, options.clock());
      if (checked.ok) return checked.value;
      // Missing or malformed key configuration is 503, whatever the token.
      if (checked.refusal === "no_keys") fail(Reason.AUTH_UNAVAILABLE, "token verification is unavailable");
      fail(Reason.INVALID_TOKEN, REFUSALS[checked.refusal]);
    },
  };
}

function partnerClaims({ sub, client_id: clientId, scope, jti, exp }: CheckedClaims): VerifiedPartnerToken | undefined {
  if (typeof sub !== "string" || sub === "" || clientId !== sub || typeof scope !== "string" || typeof jti !== "string") return undefined;
  return { clientId: sub, scopes: scope === "" ? [] : scope.split(" "), jti, exp };
}
