import type { Db } from "../../core/db/knex.js";

/** A transaction kept open until `release`, once `setup` ran in it. */
async function heldTransaction(db: Db, setup: (trx: Parameters<Parameters<Db["transaction"]>[0]>[0]) => Promise<unknown> = async () => {}) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  let ready!: () => void;
  const held = new Promise<void>((resolve) => {
    ready = resolve;
  });
  const trx = db.transaction(async (t) => {
    await setup(t);
    ready();
    await gate;
  });
  await Promise.race([held, trx]);
  return {
    release() {
      release();
      return trx;
    },
  };
}

/**
 * Every connection of `db`'s pool, each held by an open transaction until `release`: a call's
 * statement or transaction then waits for a connection (PGlite has one, PostgreSQL the pool's max).
 */
export async function holdPool(db: Db) {
  const max = (db.client as { pool: { max: number } }).pool.max;
  const held = await Promise.all(Array.from({ length: max }, () => heldTransaction(db)));
  return {
    async release() {
      await Promise.all(held.map((h) => h.release()));
    },
  };
}

/**
 * audit_records locked against writes (reads go on) until `release` (PostgreSQL: a second session):
 * a statement that writes an audit row, as the group-committed reads do, waits for it meanwhile.
 */
export async function holdAuditWrites(db: Db) {
  const held = await heldTransaction(db, (t) => t.raw("LOCK TABLE audit_records IN EXCLUSIVE MODE"));
  return {
    async release() {
      await held.release();
    },
  };
}
