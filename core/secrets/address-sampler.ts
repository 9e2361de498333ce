import { createExpiringMap } from "./expiring-map.js";

/** How long an address's unrecorded count waits for its next record before it is dropped. */
const CARRY_MS = 60 * 60_000;

/**
 * Picks which of a client address's events are recorded one by one: the first in each
 * window; the rest are only counted, and the count goes with that address's next record.
 * Memory is bounded: past `maxAddresses` the oldest address is forgotten.
 */
export function createAddressSampler(windowMs: number, maxAddresses = 10_000) {
  const entries = createExpiringMap<{ windowEnd: number; skipped: number }>(maxAddresses);
  return {
    /** Undefined when this event is only counted; else record it, with how many went unrecorded since the last record. */
    take(address: string, now: number): { unrecorded: number } | undefined {
      const e = entries.get(address, now);
      if (e && now < e.windowEnd) {
        e.skipped++;
        return undefined;
      }
      entries.set(address, { windowEnd: now + windowMs, skipped: 0 }, now + windowMs + CARRY_MS);
      return { unrecorded: e?.skipped ?? 0 };
    },
  };
}
