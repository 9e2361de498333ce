import type { HandlerContext } from "@connectrpc/connect";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { kClientNetwork } from "../context.js";
import { fail } from "../errors.js";
import type { RateLimitStore } from "../rate-limits/store.js";

/**
 * Browser flows started per minute, per client address without a session and per session with
 * one: each start writes a row, and this bounds the rows one address or session keeps alive.
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

/**
 * Runs `start` inside the address's limit: the slot is taken before the work, so concurrent
 * starts cannot overshoot.
 */
export function limitFlowStart<T>(limit: FlowStartLimit, ctx: HandlerContext, start: () => Promise<T>): Promise<T> {
  const key = `signin-flow-start:${ctx.values.get(kClientNetwork)}`;
  return limited(limit, key, "too many sign-ins were started from your network in the last minute", start);
}

/**
 * Runs a signed-in session's start (a step-up or a passkey registration) inside that session's own
 * limit, the same number per minute: a stolen cookie cannot write rows at request rate, and other
 * people's sessions and addresses are untouched.
 */
export function limitSessionFlowStart<T>(limit: FlowStartLimit, sessionId: string, start: () => Promise<T>): Promise<T> {
  return limited(limit, `signin-flow-session:${sessionId}`, "too many confirmations were started in this session in the last minute", start);
}
