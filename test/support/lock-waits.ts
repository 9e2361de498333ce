import type { Db } from "../../core/db/knex.js";

/**
 * Resolves once at least `count` statements naming `table` ("" for any) wait for a lock (PostgreSQL):
 * how a test knows the calls it started reached the row it holds, without timing them.
 */
export async function lockWaits(db: Db, table: string, count = 1): Promise<void> {
  for (;;) {
    const { rows } = await db.raw(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?`, [`%${table}%`]);
    if ((rows as { n: number }[])[0]!.n >= count) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
