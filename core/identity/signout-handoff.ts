import { randomUUID } from "node:crypto";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { ContinueSignOutRequest } from "../../gen/vaultgate/grants/v1/signin_pb.js";
import { sha256Hex } from "../../lib/crypto.js";
import { fail } from "../errors.js";
import { type AccessTokenRules, checkAccessToken } from "../keys/access-token-verifier.js";
import type { Keyring } from "../keys/keyring.js";
import type { SessionRpcDeps } from "./sessions.js";

/** How long a sign-out handoff may be carried to the other web host (a redirect's time). */
export const SIGNOUT_HANDOFF_SECONDS = 60;

/** Its own typ and audience: no access token passes for a handoff, and no handoff for a token. */
const HANDOFF_HEADER = Object.freeze({ typ: "signout-handoff+jwt" } as const);
const HANDOFF_AUDIENCE = "urn:vaultgate:signout-handoff";
const MAX_LENGTH = 2048;

export interface SignOutHandoffDeps {
  keyring: Pick<Keyring, "readyToSign" | "signJwt" | "verificationKey" | "hasVerificationKeys">;
  /** `iss` of every token core signs. */
  issuer: string;
  clock: () => Date;
}

/** Sign-out handoffs: ES256 JWTs by core's signing key, naming the user who signed out (docs/deploying.md). */
export function createSignOutHandoffs(deps: SignOutHandoffDeps) {
  // Checked by the one verifier of core's JWTs, with the handoff's own typ, audience and lifetime.
  const rules: AccessTokenRules = {
    keyring: deps.keyring,
    issuer: deps.issuer,
    audience: HANDOFF_AUDIENCE,
    maxLength: MAX_LENGTH,
    typ: HANDOFF_HEADER.typ,
    maxLifetimeSeconds: SIGNOUT_HANDOFF_SECONDS,
  };
  return {
    /** A handoff for `userId`, or "" when core cannot sign now (sign-out itself must not fail for it). */
    async mint(userId: string): Promise<string> {
      // A key another replica withdrew would sign a handoff no host accepts.
      if (!(await deps.keyring.readyToSign())) return "";
      const iat = Math.floor(deps.clock().getTime() / 1000);
      const claims = { iss: deps.issuer, aud: HANDOFF_AUDIENCE, sub: userId, jti: randomUUID(), iat, exp: iat + SIGNOUT_HANDOFF_SECONDS };
      try {
        return deps.keyring.signJwt(HANDOFF_HEADER, claims);
      } catch {
        return "";
      }
    },
    /** The user a live handoff names, or undefined for a forged, expired, malformed or foreign one. */
    async userOf(handoff: string): Promise<string | undefined> {
      const checked = await checkAccessToken(handoff, rules, deps.clock());
      const sub = checked.ok ? checked.claims.sub : undefined;
      return typeof sub === "string" && sub ? sub : undefined;
    },
  };
}

export type SignOutHandoffs = ReturnType<typeof createSignOutHandoffs>;

/** GrantsService.ContinueSignOut: ends the presented session only when the handoff names its user. */
export async function continueSignOut(deps: SessionRpcDeps & { handoffs: SignOutHandoffs }, req: ContinueSignOutRequest) {
  const userId = await deps.handoffs.userOf(req.signoutHandoff);
  if (!userId) fail(Reason.INVALID_GRANT, "sign-out handoff invalid or expired");
  // The session is checked like every other: only a live one, whose holder presents it.
  const s = await deps.sessions.verify(req.sessionToken);
  if (s.userId !== userId) fail(Reason.ACCESS_DENIED, "the sign-out handoff names another user");
  await deps.store.endSession(deps.db, sha256Hex(req.sessionToken), deps.clock(), "signed_out");
  return {};
}
