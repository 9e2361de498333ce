import type { Db } from "../db/knex.js";
import { pruneBatchSql } from "../db/sql.js";

export interface RateLimitResult {
  allowed: boolean;
  /** Attempts counted in the window, this one included when allowed. */
  count: number;
  /** When refused: seconds until the oldest counted attempt leaves the window; 0 when allowed. */
  retryAfterSeconds: number;
}

/**
 * A sliding-window log shared by replicas, one self-committing statement per check so a counted
 * attempt survives the rollback of the work it guards. Refusals are not counted: waiting lets a client back in.
 */
export function createRateLimitStore(db: Db) {
  return {
    async hit(key: string, limit: number, windowSeconds: number, now: Date): Promise<RateLimitResult> {
      const since = new Date(now.getTime() - windowSeconds * 1000);
      // expires_at: when the window after the latest counted attempt ends; past it the row
      // counts nothing and the pruner (core/maintenance/pruner.ts) may delete it.
      const expires = new Date(now.getTime() + windowSeconds * 1000);
      const { rows } = await db.raw(
        `INSERT INTO rate_limit_logs AS w (key, hits, allowed, expires_at) VALUES (:key, ARRAY[:now::timestamptz], :limit > 0, :expires)
         ON CONFLICT (key) DO UPDATE SET
           expires_at = greatest(w.expires_at, :expires::timestamptz),
           allowed = (SELECT count(*) < :limit FROM unnest(w.hits) AS h WHERE h > :since),
           hits = (SELECT CASE WHEN count(*) < :limit THEN coalesce(array_agg(h ORDER BY h), '{}') || :now::timestamptz
                               ELSE coalesce(array_agg(h ORDER BY h), '{}') END
                     FROM unnest(w.hits) AS h WHERE h > :since)
         RETURNING allowed, cardinality(hits) AS count, hits[1] AS oldest`,
        { key, now, since, limit, expires },
      );
      const row = (rows as { allowed: boolean; count: number; oldest: Date | string | null }[])[0]!;
      // A refused hit may try again once the oldest counted attempt leaves the window.
      const oldest = row.oldest ? new Date(row.oldest).getTime() : now.getTime();
      const retryAfterSeconds = row.allowed ? 0 : Math.max(1, Math.ceil((oldest + windowSeconds * 1000 - now.getTime()) / 1000));
      return { allowed: row.allowed, count: Number(row.count), retryAfterSeconds };
    },

    /** When the oldest attempt counted on `key` leaves a window of `windowSeconds` (undefined: none counted). */
    async windowEnd(key: string, windowSeconds: number): Promise<Date | undefined> {
      const { rows } = await db.raw(`SELECT hits[1] AS oldest FROM rate_limit_logs WHERE key = ?`, [key]);
      const oldest = (rows as { oldest: Date | string | null }[])[0]?.oldest;
      return oldest ? new Date(new Date(oldest).getTime() + windowSeconds * 1000) : undefined;
    },

    /**
     * Takes back one attempt that `hit` counted at `at` (the same `now`), for limits that
     * count only some outcomes: reserve a slot with `hit` before the work (so concurrent
     * attempts cannot overshoot the limit), release it when the outcome does not count.
     */
    async release(key: string, at: Date): Promise<void> {
      // Positional bindings: the slice colons must not read as named ones. Arrays built
      // by `hit` start at index 1.
      await db.raw(
        `UPDATE rate_limit_logs AS w
            SET hits = w.hits[1 : array_position(w.hits, ?::timestamptz) - 1]
                    || w.hits[array_position(w.hits, ?::timestamptz) + 1 : cardinality(w.hits)]
          WHERE w.key = ? AND array_position(w.hits, ?::timestamptz) IS NOT NULL`,
        [at, at, key, at],
      );
    },
  };
}

export type RateLimitStore = ReturnType<typeof createRateLimitStore>;

/** The pruner's batch: attempts whose window ended. */
export const PRUNE_RATE_LIMIT_LOGS = { table: "rate_limit_logs", sql: pruneBatchSql("rate_limit_logs", "expires_at <= ?", "expires_at") } as const;

/** The pruner's batch: fixed windows that started before the cutoff. */
export const PRUNE_RATE_LIMIT_WINDOWS = { table: "rate_limit_windows", sql: pruneBatchSql("rate_limit_windows", "window_start < ?", "window_start") } as const;
