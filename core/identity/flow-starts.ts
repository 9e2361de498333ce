import type { HandlerContext } from "@connectrpc/connect";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { kClientNetwork } from "../context.js";
import { fail } from "../errors.js";
import type { RateLimitStore } from "../rate-limits/store.js";

/**
 * Browser flows (passkey and provider sign-in) started without a session, per client address
 * per minute: each start writes a row, and this bounds the rows one address keeps alive.
 */
export const SIGNIN_FLOW_STARTS_PER_MINUTE = 30;

export interface FlowStartLimit {
  rateLimits: RateLimitStore;
  clock: () => Date;
  /** Starts per minute per client address a gateway vouched for ("" = direct callers, one bucket). */
  perMinute: number;
}

/**
 * Runs `start` (which writes one flow row) inside the address's limit: the slot is taken before
 * the work, so concurrent starts cannot overshoot, and given back when no row was written.
 */
export async function limitFlowStart<T>(limit: FlowStartLimit, ctx: HandlerContext, start: () => Promise<T>): Promise<T> {
  const key = `signin-flow-start:${ctx.values.get(kClientNetwork)}`;
  const now = limit.clock();
  const hit = await limit.rateLimits.hit(key, limit.perMinute, 60, now);
  if (!hit.allowed) {
    const wait = `${hit.retryAfterSeconds} second${hit.retryAfterSeconds === 1 ? "" : "s"}`;
    fail(Reason.RATE_LIMITED, `too many sign-ins were started from your network in the last minute; try again in ${wait}`, {
      retryAfterSeconds: hit.retryAfterSeconds,
    });
  }
  try {
    return await start();
  } catch (err) {
    await limit.rateLimits.release(key, now).catch(() => {});
    throw err;
  }
}
