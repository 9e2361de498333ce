import type { HandlerContext } from "@connectrpc/connect";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { kClientNetwork } from "../context.js";
import { fail } from "../errors.js";
import type { RateLimitStore } from "../rate-limits/store.js";

/**
 * Sign-ins (code, passkey, provider) started per minute, per client address without a session and
 * per session with one: each start writes a row, and this bounds the rows one address or session keeps alive.
 */
export const SIGNIN_FLOW_STARTS_PER_MINUTE = 30;

export interface FlowStartLimit {
  rateLimits: RateLimitStore;
  clock: () => Date;
  /** Starts per minute per session, and without one per client address a gateway vouched for ("" = direct callers, one bucket). */
  perMinute: number;
}

/** Takes a slot of `key` for `start` (which writes one flow row), given back when no row was written. */
async function limited<T>(limit: FlowStartLimit, key: string, refusal: string, start: () => Promise<T>): Promise<T> {
  const now = limit.clock();
  const hit = await limit.rateLimits.hit(key, limit.perMinute, 60, now);
  if (!hit.allowed) {
    const wait = `${hit.retryAfterSeconds} second${hit.retryAfterSeconds === 1 ? "" : "s"}`;
    fail(Reason.RATE_LIMITED, `${refusal}; try again in ${wait}`, { retryAfterSeconds: hit.retryAfterSeconds });
  }
  try {
    return await start();
  } catch (err) {
    await limit.rateLimits.release(key, now).catch(() => {});
    throw err;
  }
}

/** The signed-in session a start names. */
export interface FlowSession {
  sessionId: string;
  userId: string;
}

/** A start's purpose and, for a step-up (never a sign-in), whose session it confirms. */
export type FlowStart<T> = (purpose: "sign_in" | "step_up", session?: FlowSession) => Promise<T>;

/**
 * Runs a start that always belongs to a session (passkey registration, which has no purpose to
 * choose) inside that session's limit, so a stolen cookie cannot write rows at request rate.
 */
export function limitSessionFlowStart<T>(limit: FlowStartLimit, session: FlowSession, start: () => Promise<T>): Promise<T> {
  const refusal = "too many confirmations were started in this session in the last minute";
  return limited(limit, `signin-flow-session:${session.sessionId}`, refusal, start);
}

/**
 * Runs a start inside its limit, the slot taken before the work so concurrent starts cannot
 * overshoot: a signed-in session's start (step-up) counts against that session, any other
 * against its address.
 */
export function limitFlowStart<T>(limit: FlowStartLimit, ctx: HandlerContext, session: FlowSession | undefined, start: FlowStart<T>): Promise<T> {
  if (session) {
    const own = { sessionId: session.sessionId, userId: session.userId };
    return limitSessionFlowStart(limit, own, () => start("step_up", own));
  }
  const refusal = "too many sign-ins were started from your network in the last minute";
  return limited(limit, `signin-flow-start:${ctx.values.get(kClientNetwork)}`, refusal, () => start("sign_in"));
}
