import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";
import type { GrantState } from "./stores/grants.js";

/**
 * SQL twin of assertGrantUsable over AGENT_GRANT_JOIN's `g` and `u`, at the timestamptz
 * expression `atSql`: true exactly when that check would let the grant act.
 */
export const GRANT_USABLE_SQL = (atSql: string) =>
  `(g.state = 'active' AND u.status = 'active' AND g.expires_at + interval '${CLOCK_SKEW_SECONDS} seconds' >= ${atSql})`;

/** What decides whether a grant read afresh may still act. */
export interface GrantStanding {
  state: GrantState;
  userActive: boolean;
  expiresAt: Date;
}

/**
 * The one "may this grant act" rule: it exists, is active (neither superseded nor
 * revoked), its user's account is active, and it has not expired (with the clock skew).
 * Refuses with INVALID_TOKEN otherwise, naming why.
 */
export function assertGrantUsable<G extends GrantStanding>(g: G | undefined, now: Date): asserts g is G {
  if (!g) fail(Reason.INVALID_TOKEN, "the access token is missing, invalid or expired");
  if (g.state !== "active") fail(Reason.INVALID_TOKEN, `the grant has been ${g.state}`);
  if (!g.userActive) fail(Reason.INVALID_TOKEN, "the user's account is not active");
  if (g.expiresAt.getTime() + CLOCK_SKEW_SECONDS * 1000 < now.getTime()) fail(Reason.INVALID_TOKEN, "the access token has expired");
}
