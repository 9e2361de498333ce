import { randomUUID } from "node:crypto";

/** Partner tokens live exactly one hour. */
export const PARTNER_TOKEN_TTL_SECONDS = 3600;

export interface PartnerClaimsInput {
  issuer: string;
  audience: string;
  clientId: string;
  scopes: readonly string[];
  now: Date;
}

/** Exactly the partner token claims, and nothing else. */
export function partnerTokenClaims(input: PartnerClaimsInput) {
  const iat = Math.floor(input.now.getTime() / 1000);
  return {
    iss: input.issuer,
    aud: input.audience,
    sub: input.clientId,
    client_id: input.clientId,
    scope: input.scopes.join(" "),
    jti: randomUUID(),
    iat,
    nbf: iat,
    exp: iat + PARTNER_TOKEN_TTL_SECONDS,
  };
}

/** The header: `typ` at+jwt, `alg` ES256 (added with `kid` by the signer). */
export const PARTNER_TOKEN_HEADER = Object.freeze({ typ: "at+jwt" } as const);
