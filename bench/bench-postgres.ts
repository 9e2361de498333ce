/** The durable PostgreSQL every bench measures against, and what it does in the background. */
import { execFile } from "node:child_process";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import { createScratchDatabase } from "../test/support/db.js";
import { benchRoots, parentOf } from "./machine-watch.js";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../scripts/pg-throwaway.sh", import.meta.url));

// ---------------------------------------------------------------------------------------
// PostgreSQL

const BENCH_PG_DIR = "/tmp/vaultgate-bench-pg";
let server: Promise<string> | undefined;
let started = false;

/**
 * A real, durable PostgreSQL for benchmarks: BENCH_DATABASE_URL, or a throwaway server
 * with PostgreSQL's durable defaults started once per bench run. Refuses a server with
 * fsync or synchronous_commit off (BENCH_ALLOW_NONDURABLE=1 to measure one anyway).
 */
export function benchPostgres(): Promise<string> {
  server ??= (async () => {
    const url = process.env.BENCH_DATABASE_URL
      ? process.env.BENCH_DATABASE_URL
      : await run("bash", [script, "start", BENCH_PG_DIR, "55499"], { env: { ...process.env, PG_DURABLE: "1" } }).then((r) => {
          started = true;
          return r.stdout.trim();
        });
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const show = async (name: string) => ((await client.query(`SHOW ${name}`)).rows[0] as Record<string, string>)[name]!;
      const settings = { fsync: await show("fsync"), synchronous_commit: await show("synchronous_commit"), full_page_writes: await show("full_page_writes") };
      const backend = ((await client.query("SELECT pg_backend_pid() AS pid")).rows[0] as { pid: number }).pid;
      const postmaster = parentOf(backend);
      if (postmaster) benchRoots.add(postmaster);
      console.log(
        `PostgreSQL ${url.replace(/\/\/[^@]*@/, "//")}: ${Object.entries(settings)
          .map(([k, v]) => `${k}=${v}`)
          .join(" ")}${postmaster ? `, postmaster pid ${postmaster}` : ", not on this machine (its CPU counts as other load)"}`,
      );
      const durable = settings.fsync === "on" && settings.synchronous_commit !== "off";
      if (!durable && process.env.BENCH_ALLOW_NONDURABLE !== "1") {
        throw new Error(
          `bench PostgreSQL is not durable (${JSON.stringify(settings)}); a leftover throwaway cluster? run scripts/pg-throwaway.sh stop ${BENCH_PG_DIR}`,
        );
      }
    } finally {
      await client.end();
    }
    return url;
  })();
  return server;
}

/**
 * Waits for autovacuum and checkpoint work left by earlier benches: those processes count as
 * the system under test, so otherwise a bench would measure the previous one's clean-up.
 */
export async function settleBenchPostgres(): Promise<void> {
  if (!server) return;
  const client = new pg.Client({ connectionString: await server });
  await client.connect();
  try {
    const t0 = performance.now();
    let busy = 0;
    for (;;) {
      const { rows } = await client.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND state = 'active'`);
      busy = (rows[0] as { n: number }).n;
      if (busy === 0 || performance.now() - t0 > 120_000) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    await client.query("CHECKPOINT");
    const waited = (performance.now() - t0) / 1000;
    if (busy > 0) console.log(`PostgreSQL still had ${busy} autovacuum worker(s) busy after 120 s; measuring anyway`);
    else if (waited > 1) console.log(`waited ${waited.toFixed(1)} s for PostgreSQL to settle (autovacuum, checkpoint)`);
  } finally {
    await client.end();
  }
}

/** Stops the throwaway server if this run started it (bench/run.ts calls it at the end). */
export async function stopBenchPostgres(): Promise<void> {
  if (started) await run("bash", [script, "stop", BENCH_PG_DIR]);
  started = false;
  server = undefined;
}

/** A fresh database on the bench server. */
export async function benchDatabase() {
  const base = await benchPostgres();
  const previous = process.env.TEST_DATABASE_URL;
  process.env.TEST_DATABASE_URL = base;
  try {
    return (await createScratchDatabase())!;
  } finally {
    if (previous === undefined) delete process.env.TEST_DATABASE_URL;
    else process.env.TEST_DATABASE_URL = previous;
  }
}

// ---------------------------------------------------------------------------------------
// PostgreSQL's own background work during a measurement

/**
 * Names the bench PostgreSQL's own background work during a measurement (checkpoints,
 * autovacuum), which slows a round for reasons of timing, and the WAL bytes it cost
 * (from pg_current_wal_lsn, exact at once unlike pg_stat_wal).
 */
export async function watchPostgres(): Promise<
  { start(): Promise<() => Promise<{ background: string; walBytes: number }>>; close(): Promise<void> } | undefined
> {
  if (!server) return undefined;
  const client = new pg.Client({ connectionString: await server });
  await client.connect();
  const version = Number(((await client.query("SHOW server_version_num")).rows[0] as { server_version_num: string }).server_version_num);
  // PostgreSQL 17 moved the checkpoint counters to pg_stat_checkpointer.
  const checkpoints =
    version >= 170000 ? "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)" : "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)";
  const sql = `SELECT ${checkpoints}::bigint AS checkpoints,
    EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' AND state = 'active') AS autovacuum,
    pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal`;
  const look = async () => {
    const row = (await client.query(sql)).rows[0] as { checkpoints: string; autovacuum: boolean; wal: string };
    return { checkpoints: Number(row.checkpoints), autovacuum: row.autovacuum, wal: Number(row.wal) };
  };
  return {
    async start() {
      const before = await look();
      return async () => {
        const after = await look();
        return {
          background: [after.checkpoints > before.checkpoints ? "checkpoint" : "", before.autovacuum || after.autovacuum ? "autovacuum" : ""]
            .filter(Boolean)
            .join(", "),
          walBytes: after.wal - before.wal,
        };
      };
    },
    close: () => client.end(),
  };
}
