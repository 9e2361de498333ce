import { randomBytes } from "node:crypto";
import knexFactory from "knex";
import { createDb, type Db } from "../../core/db/knex.js";
import { migrateLatest } from "../../core/db/migrate.js";
import { FEED_HORIZON_SQL } from "../../core/paging.js";

let shared: Promise<{ db: Db; url?: string; drop(): Promise<void> }> | undefined;

/**
 * One migrated database per test process: embedded PGlite, or a fresh database on the
 * server named by TEST_DATABASE_URL (dropped at the end). Tests isolate by creating
 * their own partners and users, never by truncating.
 */
export function testDatabase() {
  shared ??= open();
  return shared;
}

/** A fresh database URL on the TEST_DATABASE_URL server, for tests that need their own processes. */
export async function createScratchDatabase(): Promise<{ url: string; drop(): Promise<void> } | undefined> {
  const base = process.env.TEST_DATABASE_URL;
  if (!base) return undefined;
  const name = `vg_test_${randomBytes(6).toString("hex")}`;
  const admin = knexFactory({ client: "pg", connection: base, pool: { min: 0, max: 1 } });
  await admin.raw(`CREATE DATABASE ${name}`);
  await admin.destroy();
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const a = knexFactory({ client: "pg", connection: base, pool: { min: 0, max: 1 } });
      await a.raw(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await a.destroy();
    },
  };
}

/**
 * A migrated database of the test's own (not the shared one): for a core whose keys differ
 * from every other test's (a database records which outside keys protect it).
 */
export function ownDatabase() {
  return open();
}

async function open() {
  const scratch = await createScratchDatabase();
  const db = createDb(scratch ? { url: scratch.url, poolMax: 20 } : {});
  await migrateLatest(db);
  return {
    db,
    url: scratch?.url,
    async drop() {
      await db.destroy();
      await scratch?.drop();
    },
  };
}

/** Closes the shared database after the whole run (mocha root hook). */
export async function closeTestDatabase() {
  if (!shared) return;
  const s = await shared;
  shared = undefined;
  await s.drop();
}

export const usingPostgres = () => Boolean(process.env.TEST_DATABASE_URL);

/** `fn` for each item: all at once on PostgreSQL (a race), one after another on the embedded database. */
export async function atOnceOnPostgres<T, R>(items: T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  if (usingPostgres()) return Promise.all(items.map(fn));
  const out: R[] = [];
  for (const item of items) out.push(await fn(item));
  return out;
}

/**
 * Skips the caller on the embedded database, saying why in the title; CI runs these in its
 * PostgreSQL pass, so the skip never hides a broken feature.
 */
export function requirePostgres(ctx: Mocha.Context, why: string): void {
  if (usingPostgres()) return;
  const label = (t: { title: string }) => {
    if (!t.title.includes("PostgreSQL only")) t.title += ` (PostgreSQL only, skipped on PGlite: ${why})`;
  };
  // In a hook mocha also sets currentTest (to the suite's first test): every test the hook skips is labelled.
  const running = ctx.test as (Mocha.Runnable & { type?: string }) | undefined;
  if (running?.type === "hook") running.parent?.eachTest(label);
  else if (ctx.currentTest ?? running) label((ctx.currentTest ?? running)!);
  ctx.skip();
}

/**
 * Waits until every transaction open at the call has ended: feeds show a row only once no older
 * transaction could commit before it, and on a shared server one can outlast the feed's own wait.
 * Call it before reading a feed whose rows the test counts.
 */
export async function feedsSettled(db: Db, timeoutMs = 10_000): Promise<void> {
  // A fresh xid, newer than that of every transaction open now. (A snapshot's xmax is not:
  // it is the newest *completed* xid plus one, so a transaction that started after it
  // and is still open sits at or above it.)
  const { rows } = await db.raw(`SELECT pg_current_xact_id()::text AS xid`);
  const mark = BigInt((rows as { xid: string }[])[0]!.xid);
  for (const deadline = Date.now() + timeoutMs; ; ) {
    // The feeds' own horizon (core/paging.ts): once it passes the mark, every row written
    // before the call is returned.
    const { rows: horizon } = await db.raw(FEED_HORIZON_SQL);
    if (BigInt((horizon as { xid: string }[])[0]!.xid) > mark) return;
    if (Date.now() > deadline) throw new Error(`a transaction older than xid ${mark} is still open after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
