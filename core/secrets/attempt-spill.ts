import { randomBytes } from "node:crypto";
import { hmacSha256 } from "../../lib/crypto.js";

/**
 * Where attempt counts go when the per-id map pushes out a live entry: fixed-size buckets
 * keyed by a process-secret hash of the id. A bucket only adds up, so an evicted id never
 * regains budget inside its window; ids sharing a bucket are refused sooner, never later.
 */
export function createAttemptSpill(buckets: number) {
  const key = randomBytes(32);
  const counts = new Uint32Array(buckets);
  const until = new Float64Array(buckets);
  const bucketOf = (id: string) => Number.parseInt(hmacSha256(key, id).slice(0, 8), 16) % buckets;
  return {
    /** Keeps `n` attempts of `id` that count until `end` (epoch ms). */
    add(id: string, n: number, end: number, now: number): void {
      const b = bucketOf(id);
      if (until[b]! <= now) counts[b] = 0;
      counts[b] = Math.min(0xffffffff, counts[b]! + n);
      until[b] = Math.max(until[b]!, end);
    },
    /** Attempts still counting against `id` (and any id sharing its bucket). */
    count(id: string, now: number): number {
      const b = bucketOf(id);
      return until[b]! > now ? counts[b]! : 0;
    },
  };
}
