import type { Db } from "../../core/db/knex.js";

/**
 * Every connection of `db`'s pool, each held by an open transaction until `release`: a call's
 * statement or transaction then waits for a connection (PGlite has one, PostgreSQL the pool's max).
 */
export async function holdPool(db: Db) {
  const max = (db.client as { pool: { max: number } }).pool.max;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  let held = 0;
  const transactions = Array.from({ length: max }, () =>
    db.transaction(async () => {
      held++;
      await gate;
    }),
  );
  while (held < max) await new Promise((resolve) => setTimeout(resolve, 10));
  return {
    async release() {
      release();
      await Promise.all(transactions);
    },
  };
}
