import type { Db } from "../db/knex.js";

export interface RateLimitResult {
  allowed: boolean;
  /** Attempts counted in the window, this one included when allowed. */
  count: number;
}

/**
 * A sliding-window log shared by every replica through the database. Each check runs
 * in its own transaction, so a counted attempt survives the rollback of the work it guards.
 */
export function createRateLimitStore(db: Db) {
  return {
    async hit(key: string, limit: number, windowSeconds: number, now: Date): Promise<RateLimitResult> {
      return db.transaction(async (trx) => {
        // Serialise checks of one key so concurrent attempts cannot both see room.
        await trx.raw(`SELECT pg_advisory_xact_lock(hashtextextended(?, 0))`, [key]);
        const since = new Date(now.getTime() - windowSeconds * 1000);
        await trx.raw(`DELETE FROM rate_limit_hits WHERE key = ? AND at <= ?`, [key, since]);
        const { rows } = await trx.raw(`SELECT count(*)::int AS n FROM rate_limit_hits WHERE key = ?`, [key]);
        const count = Number((rows as { n: number }[])[0]!.n);
        if (count >= limit) return { allowed: false, count };
        await trx.raw(`INSERT INTO rate_limit_hits (key, at) VALUES (?, ?)`, [key, now]);
        return { allowed: true, count: count + 1 };
      });
    },
  };
}

export type RateLimitStore = ReturnType<typeof createRateLimitStore>;
