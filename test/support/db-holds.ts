import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import type { Db } from "../../core/db/knex.js";
import { rpcDuration } from "../../core/observability/metrics.js";
import { countOf } from "./metrics.js";
import { thrownBy } from "./refusals.js";
import { until } from "./until.js";

/** A transaction kept open until `release`, once `setup` ran in it. */
export async function heldTransaction(db: Db, setup: (trx: Parameters<Parameters<Db["transaction"]>[0]>[0]) => Promise<unknown> = async () => {}) {
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

/** Calls of `service`/`method` core finished (with `code`, or any). */
const finished = (service: string, method: string, code?: string) => countOf(rpcDuration, { service, method, ...(code ? { code } : {}) });

/**
 * Runs `call` (with a deadline of `deadlineMs`) while `db`'s pool is held, frees the pool once the
 * deadline passed, and checks the caller got DEADLINE_EXCEEDED and core finished the call without OK.
 */
export async function leftInThePool(db: Db, deadlineMs: number, service: string, method: string, call: () => Promise<unknown>) {
  const before = { finished: await finished(service, method), answered: await finished(service, method, "OK") };
  const pool = await holdPool(db);
  try {
    const err = (await thrownBy(call)) as ConnectError;
    expect(err, String(err)).to.be.instanceOf(ConnectError);
    expect(Code[err.code], err.rawMessage).to.equal("DeadlineExceeded");
    // Core's own deadline starts when the headers arrive, a moment after the client's: held this
    // much longer, core's signal has aborted by the time the call gets a connection.
    await new Promise((r) => setTimeout(r, deadlineMs));
  } finally {
    await pool.release();
  }
  await until("core finished the call", async () => (await finished(service, method)) === before.finished + 1);
  // Refused, whether its own deadline or the client's reset of the stream reached it first.
  expect(await finished(service, method, "OK"), "core refused it once it had a connection").to.equal(before.answered);
}

/**
 * Runs `call` (with a deadline of `deadlineMs`) while `db`'s pool is held, frees the pool once the
 * deadline passed, and waits until `done` holds: a change that ends access goes on for a caller who left.
 */
export async function doneThoughLeft(db: Db, deadlineMs: number, call: () => Promise<unknown>, done: () => Promise<boolean>) {
  const pool = await holdPool(db);
  try {
    await thrownBy(call);
    await new Promise((r) => setTimeout(r, deadlineMs));
  } finally {
    await pool.release();
  }
  await until("the change went on", done);
}
