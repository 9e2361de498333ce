/**
 * What every bench shares, so each measures the same way (docs/benchmarks.md):
 * - the shipped configuration: the production logger (cli/logger.ts) at `info`, lines
 *   written synchronously to a file as `vaultgate serve` writes them to stdout;
 * - a durable PostgreSQL (fsync, synchronous_commit and full_page_writes on);
 * - the load generator in its own process (bench/loadgen.ts), checking every response's
 *   status and body;
 * - comparisons in alternating rounds (ours, peer, ours, peer, ...), every round printed
 *   with the machine's load while it ran, judged on the median of the per-round ratios;
 * - a PASS/FAIL verdict for every target, summarised at the end of `npm run bench`;
 * - every printed line, table and verdict recorded in the run's JSON file (bench/results.ts).
 */
import { execFile, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, openSync, closeSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import pg from "pg";
import type { Logger } from "pino";
import { createLogger, logDestination } from "../cli/logger.js";
import { createScratchDatabase } from "../test/support/db.js";
import type { CoreClients } from "../gateways/core-clients.js";
import { benchResults } from "./results.js";
import { DISTURBED_CORES, loadBetween, parseCpuLine, parseIoFull, parseSchedstat, parseStat, waitedShare, type CpuSnapshot, type Load, type ProcSample, type ThreadSched } from "./machine-load.js";

export type { Load } from "./machine-load.js";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../scripts/pg-throwaway.sh", import.meta.url));
const bin = fileURLToPath(new URL("../bin/vaultgate.mjs", import.meta.url));
/** True when this runs from the bundle `npm run bench` makes (scripts/bench.mjs), false through tsx. */
const compiled = import.meta.url.endsWith(".js");
/** The extension of the benches' own files in this form: `.js` bundled, `.ts` through tsx. */
export const BENCH_EXT = compiled ? ".js" : ".ts";

/**
 * The node arguments that start a sibling script of the benches: its bundled .js with
 * plain node under `npm run bench`, its .ts through tsx when the benches run from source.
 */
export function benchScript(name: string): string[] {
  const file = fileURLToPath(new URL(`./${name}${BENCH_EXT}`, import.meta.url));
  return compiled ? [file] : ["--import", "tsx", file];
}

/** A server a bench runs in a process of its own (startBenchChild). */
export interface BenchChild<Info> {
  pid: number;
  /** The JSON line the child printed first. */
  info: Info;
  /** Asks the child to do `op` (outside any measurement) and resolves with its answer. */
  call<T>(op: string, arg?: unknown): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts a sibling script (benchScript) with `args` and an IPC channel, and resolves with
 * the first JSON line it prints. The child answers `{ id, op, arg }` messages with
 * `{ id, result }` or `{ id, error }` (serveBenchCalls), so a bench can ask a server in
 * another process for fixtures (codes, tokens) between measurements.
 */
export async function startBenchChild<Info>(script: string, args: string[] = []): Promise<BenchChild<Info>> {
  const child = spawn(process.execPath, [...benchScript(script), ...args], { stdio: ["ignore", "pipe", "inherit", "ipc"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  let gone = false;
  child.on("message", (m: { id: number; result?: unknown; error?: string }) => {
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.error !== undefined) p?.reject(new Error(`${script}: ${m.error}`));
    else p?.resolve(m.result);
  });
  void exited.then(() => {
    gone = true;
    for (const p of pending.values()) p.reject(new Error(`${script} exited`));
    pending.clear();
  });
  const info = await new Promise<Info>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const line = out.split("\n").find((l) => l.startsWith("{"));
      if (line) resolve(JSON.parse(line) as Info);
    });
    void exited.then(() => reject(new Error(`${script} ${args.join(" ")} exited:\n${out}`)));
  });
  let nextId = 0;
  return {
    pid: child.pid!,
    info,
    call<T>(op: string, arg?: unknown) {
      if (gone) return Promise.reject(new Error(`${script} exited`));
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
        child.send({ id, op, arg });
      });
    },
    async stop() {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** The child's side of startBenchChild: answers each call with `handlers[op](arg)`. */
export function serveBenchCalls(handlers: Record<string, (arg: never) => Promise<unknown>>): void {
  process.on("message", (m: { id: number; op: string; arg?: unknown }) => {
    const handler = handlers[m.op];
    const answer = handler ? handler(m.arg as never) : Promise.reject(new Error(`unknown call ${m.op}`));
    answer.then(
      (result) => process.send!({ id: m.id, result }),
      (err: unknown) => process.send!({ id: m.id, error: err instanceof Error ? err.message : String(err) }),
    );
  });
}

// ---------------------------------------------------------------------------------------
// Knobs: BENCH_QUICK=1 for development (2 s measurements, one round); BENCH_ROUNDS and
// BENCH_SECONDS override either.

export const QUICK = process.env.BENCH_QUICK === "1";
/** Rounds of each alternating comparison (at least 3 unless BENCH_QUICK). */
export const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3));
/**
 * Rounds of a comparison that needs more than ROUNDS (a p99 verdict, ratios that should
 * sit at 1.0): `full` normally, 1 with BENCH_QUICK, or BENCH_ROUNDS.
 */
export function comparisonRounds(full: number): number {
  return process.env.BENCH_ROUNDS ? ROUNDS : QUICK ? 1 : full;
}
/**
 * Rounds of a comparison whose sides measure nearly the same and whose line sits close
 * to 1.0x (grown vs fresh data at 0.95x, info vs silent logging at 0.90x). Each round's
 * ratio is then mostly this machine's noise: one measurement of 5 s moves by about 8%
 * from the next, and the rounds of one comparison spread 0.82-1.27 in a run. With five
 * rounds (three for logging) the median still moved enough between runs of the same
 * code to flip the verdict (logging: 0.98x, 1.04x, then 0.83x). For sides that truly
 * measure alike, nine rounds make a false FAIL about half as likely as five.
 */
export const NEAR_ONE_ROUNDS = comparisonRounds(9);

/** Seconds of one measurement: `full` normally, 2 with BENCH_QUICK, or BENCH_SECONDS. */
export function seconds(full: number): number {
  return Number(process.env.BENCH_SECONDS ?? (QUICK ? 2 : full));
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

const BENCH_PG_DIR = "/tmp/vaultgate-bench-pg";
let server: Promise<string> | undefined;
let started = false;
/** Processes of the bench's PostgreSQL (the postmaster; its backends are its children). */
const benchRoots = new Set<number>();

/**
 * A real, durable PostgreSQL for benchmarks: BENCH_DATABASE_URL, or a throwaway server
 * with PostgreSQL's durable defaults started once per bench run. Refuses a server with
 * fsync or synchronous_commit off (BENCH_ALLOW_NONDURABLE=1 to measure one anyway).
 */
export function benchPostgres(): Promise<string> {
  server ??= (async () => {
    const url = process.env.BENCH_DATABASE_URL
      ? process.env.BENCH_DATABASE_URL
      : await run("bash", [script, "start", BENCH_PG_DIR, "55499"], { env: { ...process.env, PG_DURABLE: "1" } }).then((r) => ((started = true), r.stdout.trim()));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const show = async (name: string) => ((await client.query(`SHOW ${name}`)).rows[0] as Record<string, string>)[name]!;
      const settings = { fsync: await show("fsync"), synchronous_commit: await show("synchronous_commit"), full_page_writes: await show("full_page_writes") };
      const backend = ((await client.query("SELECT pg_backend_pid() AS pid")).rows[0] as { pid: number }).pid;
      const postmaster = parentOf(backend);
      if (postmaster) benchRoots.add(postmaster);
      console.log(`PostgreSQL ${url.replace(/\/\/[^@]*@/, "//")}: ${Object.entries(settings).map(([k, v]) => `${k}=${v}`).join(" ")}${postmaster ? `, postmaster pid ${postmaster}` : ", not on this machine (its CPU counts as other load)"}`);
      const durable = settings.fsync === "on" && settings.synchronous_commit !== "off";
      if (!durable && process.env.BENCH_ALLOW_NONDURABLE !== "1") {
        throw new Error(`bench PostgreSQL is not durable (${JSON.stringify(settings)}); a leftover throwaway cluster? run scripts/pg-throwaway.sh stop ${BENCH_PG_DIR}`);
      }
    } finally {
      await client.end();
    }
    return url;
  })();
  return server;
}

/**
 * Waits until the bench server has caught up with what earlier benches left behind
 * (bench/run.ts calls it between benches): autovacuum on the tables a seeding bench
 * filled, and the dirty pages a checkpoint must write. Its processes count as the system
 * under test, not as other load, so without this wait a bench after the grown-data or
 * ledger seeding measured their clean-up. Gives up after two minutes and says so.
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
// Logging as shipped

const LOG_DIR = join(tmpdir(), "vaultgate-bench-logs");

/** A file the bench's servers log to (removed by `removeBenchLogs`). */
export function benchLogFile(name: string): string {
  mkdirSync(LOG_DIR, { recursive: true });
  return join(LOG_DIR, `${name}-${process.pid}-${Date.now()}.log`);
}

/**
 * The production logger (cli/logger.ts: redaction, the service's buffered destination) at
 * `level` (default `info`, the shipped default), writing to a file instead of stdout.
 */
export function benchLogger(name: string, level = "info"): Logger {
  return createLogger(level, logDestination(benchLogFile(name)));
}

export function removeBenchLogs(): void {
  rmSync(LOG_DIR, { recursive: true, force: true });
}

/**
 * `vaultgate serve --role all` as shipped (LOG_LEVEL info unless `env` says otherwise),
 * its stdout and stderr going to a log file; resolves when it reports its addresses.
 */
export async function startService(
  env: Record<string, string>,
  /** Another checkout's bin/vaultgate.mjs (e.g. an older version to compare with). */
  binPath = bin,
): Promise<{ gatewayUrl: string; coreUrl: string; pid: number; stop(): Promise<void> }> {
  const logFile = benchLogFile("serve");
  const fd = openSync(logFile, "w");
  const child = spawn(process.execPath, [binPath, "serve", "--role", "all"], {
    env: { ...process.env, PORT: "0", CORE_PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", ...env },
    stdio: ["ignore", fd, fd],
  });
  closeSync(fd);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  let exitCode: number | null | undefined;
  void exited.then((c) => (exitCode = c));
  const deadline = Date.now() + 60_000;
  for (;;) {
    const text = readFileSync(logFile, "utf8");
    let gatewayUrl: string | undefined;
    let coreUrl: string | undefined;
    for (const line of text.split("\n")) {
      if (!line.startsWith("{")) continue;
      try {
        const e = JSON.parse(line) as { msg?: string; url?: string; gateway?: string };
        if (e.msg?.startsWith("core listening")) coreUrl = e.url;
        if (e.gateway) gatewayUrl = e.gateway;
      } catch {
        /* partial line */
      }
    }
    if (gatewayUrl && coreUrl) {
      return {
        gatewayUrl,
        coreUrl,
        pid: child.pid!,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
          await exited;
        },
      };
    }
    if (exitCode !== undefined || Date.now() > deadline) throw new Error(`vaultgate serve did not start:\n${text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// ---------------------------------------------------------------------------------------
// Machine load: CPU of every process that is not part of the bench

function parentOf(pid: number): number | undefined {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, "utf8")).ppid;
  } catch {
    return undefined;
  }
}

/**
 * The processes that only launched this bench (`npm run bench`, its `sh -c`,
 * scripts/bench.mjs): this process's ancestors, nearest first, as long as each is one of
 * those. Their CPU is the bench's own, not outside load. The walk stops at the first
 * other process (the operator's shell), whose other children are not the bench's.
 */
const LAUNCHER = /^npm run bench(?:[ \0]|$)|(?:^|\0)scripts\/bench\.mjs(?:\0|$)|^(?:\/bin\/)?sh\0-c\0node scripts\/bench\.mjs/;
const launchers: number[] = (() => {
  const out: number[] = [];
  for (let pid: number | undefined = process.ppid; pid !== undefined && pid > 1; pid = parentOf(pid)) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      break;
    }
    if (!LAUNCHER.test(cmdline)) break;
    out.push(pid);
  }
  return out;
})();

function snapshot(): CpuSnapshot {
  const { busy, steal } = parseCpuLine(readFileSync("/proc/stat", "utf8"));
  let ioFull: number | undefined;
  try {
    ioFull = parseIoFull(readFileSync("/proc/pressure/io", "utf8"));
  } catch {
    // a kernel without pressure stall information: no stall figure
  }
  const procs = new Map<number, ProcSample>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      procs.set(Number(name), parseStat(readFileSync(`/proc/${name}/stat`, "utf8")));
    } catch {
      /* exited meanwhile */
    }
  }
  return { at: performance.now(), busy, steal, ioFull, procs };
}

/**
 * The scheduler counters of process `pid`'s main thread (its thread id is its pid), or
 * undefined where the kernel keeps none or the process is gone.
 */
function mainThreadSched(pid: number): ThreadSched | undefined {
  try {
    return parseSchedstat(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8"));
  } catch {
    return undefined;
  }
}

const PROBE_INPUT = Buffer.alloc(16 * 1024, 7);

/**
 * How fast this machine's CPU is right now: the best of three timings of a fixed piece of
 * work (SHA-256 over 1.6 MB, about 1.2 ms here). On a virtual machine the same work takes
 * longer while the host is busy with other machines, and not all of that shows as steal:
 * six runs of an ES256 signing loop, seconds apart on an idle machine, took 25.3-31.9 us
 * per signature. A round whose probes read well above the others' ran on a slower machine.
 */
function cpuProbe(): number {
  let best = Infinity;
  for (let run = 0; run < 3; run++) {
    const t = performance.now();
    for (let i = 0; i < 100; i++) createHash("sha256").update(PROBE_INPUT).digest();
    best = Math.min(best, performance.now() - t);
  }
  return best;
}

/** Starts measuring the machine's load; call the result when the measured work ends. */
export function watchLoad(): () => Load {
  // The probes run outside the measured window (before the first snapshot, after the last).
  const probeBefore = cpuProbe();
  const before = snapshot();
  return () => {
    const after = snapshot();
    return loadBetween(before, after, [process.pid, ...launchers, ...benchRoots], [probeBefore, cpuProbe()]);
  };
}

/** The columns every table of measured rounds prints about the machine (watchLoad). */
export function loadColumns(l: Load): Record<string, string | number> {
  return {
    "machine cores": fmt(l.machine, 2),
    "others cores": fmt(l.others, 2),
    "busiest other": l.top ? `${l.top.name} ${fmt(l.top.cores, 2)}` : "-",
    "io stall ms": l.ioStallMs === undefined ? "-" : fmt(l.ioStallMs, 0),
    "cpu probe ms": `${fmt(l.probeMs[0], 2)}/${fmt(l.probeMs[1], 2)}`,
    disturbed: l.disturbed ? "DISTURBED" : "",
  };
}

// ---------------------------------------------------------------------------------------
// Load generation (bench/loadgen.ts, a child process) with a check of every response

/** What a response must be to count as a success. */
export interface BodyCheck {
  /** Expected HTTP status (default 200), or the statuses any of which is right. */
  status?: number | readonly number[];
  /** Dotted paths that must be present (not undefined) in the JSON body. */
  keys?: string[];
  /** A JSON-RPC response with a `result`, no `error`, and no `result.isError`. */
  jsonrpc?: boolean;
}

export interface LoadSpec {
  url: string;
  method?: "GET" | "POST";
  headers?: Record<string, string>;
  /** The same body on every request. */
  body?: string;
  /** Each body sent exactly once (single-use codes); the run ends when all are answered. */
  bodies?: string[];
  /**
   * Refresh-token rotation: each request presents the newest token of one lineage (a form
   * body of `form` plus `field=<token>`), and its answer's `field` goes back to the pool.
   */
  rotate?: { tokens: string[]; form: Record<string, string>; field: string };
  /** Per-connection headers, round-robin over connections (e.g. one partner each). */
  connectionHeaders?: Record<string, string>[];
  /** Per-request headers, round-robin over requests (paced loads only). */
  requestHeaders?: Record<string, string>[];
  /** Source address of the connections (paced loads only; e.g. 127.0.1.1, another client address on loopback). */
  localAddress?: string;
  connections: number;
  /** Duration in seconds (ignored with `bodies`). */
  seconds?: number;
  /**
   * Requests per second in all: an open loop that sends one request every 1/rate s on
   * whichever of `connections` is free, whatever the answers (bench/loadgen.ts, "paced").
   */
  rate?: number;
  /** Stop after this many requests instead of after `seconds` (a paced load: exactly this many). */
  requests?: number;
  check: BodyCheck;
  /**
   * The process whose main thread answers (`process.pid` for a server in the bench's own
   * process): the measurement then says how long that thread waited for a core.
   */
  server?: number;
}

export interface Measurement {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  /** Requests that failed: non-2xx or unexpected status, a body that does not match, an error, a timeout. */
  failures: number;
  /** A few failures, for the printout. */
  samples: string[];
  /** How many answers had each HTTP status (paced loads). */
  statuses?: Record<string, number>;
  /**
   * With `server`: of the time the server's main thread was ready to run during the load,
   * the share it waited while other tasks held every core (see `waitedShare`).
   */
  serverWaited?: number;
}

export function checkResponse(check: BodyCheck, status: number, body: string): string | undefined {
  const want = check.status ?? 200;
  if (typeof want === "number" ? status !== want : !want.includes(status)) return `HTTP ${status} (want ${String(want)}): ${body.slice(0, 200)}`;
  if (!check.jsonrpc && !check.keys?.length) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return `not JSON: ${body.slice(0, 200)}`;
  }
  if (check.jsonrpc) {
    const rpc = json as { error?: unknown; result?: { isError?: boolean } };
    if (rpc.error !== undefined) return `JSON-RPC error: ${JSON.stringify(rpc.error).slice(0, 200)}`;
    if (rpc.result === undefined) return `no JSON-RPC result: ${body.slice(0, 200)}`;
    if (rpc.result.isError) return `tool error: ${body.slice(0, 200)}`;
  }
  for (const key of check.keys ?? []) {
    let v: unknown = json;
    for (const part of key.split(".")) v = v === null || typeof v !== "object" ? undefined : (v as Record<string, unknown>)[part];
    if (v === undefined) return `missing ${key}: ${body.slice(0, 200)}`;
  }
  return undefined;
}

/** Runs one load in the load-generator process (only ever against 127.0.0.1). */
export async function load(spec: LoadSpec): Promise<Measurement> {
  if (!/^http:\/\/127\.0\.0\.1[:/]/.test(spec.url)) throw new Error("benchmarks only target 127.0.0.1");
  const child = spawn(process.execPath, benchScript("loadgen"), { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const before = spec.server === undefined ? undefined : mainThreadSched(spec.server);
  child.stdin!.end(JSON.stringify({ seconds: seconds(8), ...spec }));
  const code = await exited;
  if (code !== 0) throw new Error(`load generator exited with ${code}: ${out}`);
  const measured = JSON.parse(out) as Measurement;
  if (spec.server !== undefined) measured.serverWaited = waitedShare(before, mainThreadSched(spec.server));
  return measured;
}

// ---------------------------------------------------------------------------------------
// PostgreSQL's own background work during a measurement

/**
 * Starts watching the bench PostgreSQL for its own background work (none when no bench
 * server was started): checkpoints that ran, and autovacuum workers busy when the
 * measurement started or ended. Its processes are the system under test, so the load
 * columns count them as the bench's; this names them. A checkpoint makes the pages it
 * writes out cost a full-page image in the WAL when next changed, so a round it lands in
 * is slower for reasons of timing rather than of the code measured.
 *
 * It also reads how far the WAL's insert position moved (pg_current_wal_lsn, exact at
 * once, unlike pg_stat_wal's counters, which backends report up to a second late): the
 * bytes of WAL the measurement cost, whoever wrote them.
 */
async function watchPostgres(): Promise<{ start(): Promise<() => Promise<{ background: string; walBytes: number }>>; close(): Promise<void> } | undefined> {
  if (!server) return undefined;
  const client = new pg.Client({ connectionString: await server });
  await client.connect();
  const version = Number(((await client.query("SHOW server_version_num")).rows[0] as { server_version_num: string }).server_version_num);
  // PostgreSQL 17 moved the checkpoint counters to pg_stat_checkpointer.
  const checkpoints = version >= 170000 ? "(SELECT num_timed + num_requested FROM pg_stat_checkpointer)" : "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)";
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
          background: [after.checkpoints > before.checkpoints ? "checkpoint" : "", before.autovacuum || after.autovacuum ? "autovacuum" : ""].filter(Boolean).join(", "),
          walBytes: after.wal - before.wal,
        };
      };
    },
    close: () => client.end(),
  };
}

/**
 * What every measured round records besides its own numbers: the machine's load
 * (watchLoad) and PostgreSQL's own background work (watchPostgres). `start()` before
 * the measurement; the function it returns after it.
 */
export async function watchRounds(): Promise<{ start(): Promise<() => Promise<{ load: Load; background: string; walBytes?: number }>>; close(): Promise<void> }> {
  const pgWatch = await watchPostgres();
  return {
    async start() {
      const stopPostgres = await pgWatch?.start();
      const stopLoad = watchLoad();
      return async () => {
        const load = stopLoad();
        return { load, ...(stopPostgres ? await stopPostgres() : { background: "" }) };
      };
    },
    close: async () => pgWatch?.close(),
  };
}

// ---------------------------------------------------------------------------------------
// Alternating comparisons

export interface Side {
  name: string;
  /** One measurement (a `load`, or anything measured the same way). */
  measure(round: number): Promise<Measurement>;
}

export interface SideResult {
  name: string;
  /**
   * `background`: PostgreSQL's own work seen during the measurement ("checkpoint",
   * "autovacuum"), or ""; `walBytes`: the WAL written meanwhile (with a bench PostgreSQL).
   */
  rounds: (Measurement & { load: Load; background: string; walBytes?: number })[];
  rps: number;
  p50: number;
  p99: number;
  failures: number;
}

export interface Alternation {
  title: string;
  sides: SideResult[];
  /** Per round: the first side's req/s over the second's. */
  ratios: number[];
  /** Median of `ratios`. */
  ratio: number;
  failures: number;
  disturbed: number;
  /** Measurements during which PostgreSQL checkpointed or vacuumed (printed, not judged). */
  background: number;
}

/** Per round: `a`'s req/s over `b`'s (the ratios an Alternation is judged by). */
export function roundRatios(a: SideResult, b: SideResult): number[] {
  return a.rounds.map((x, i) => x.rps / b.rounds[i]!.rps);
}

/** Bytes of WAL per answered request, or undefined when either is unknown. */
const walPerRequest = (walBytes: number | undefined, requests: number) => (walBytes === undefined || requests === 0 ? undefined : walBytes / requests);

/** Whole bytes, or "-" when there are none. */
const bytes = (n: number | undefined) => (n === undefined ? "-" : fmt(n, 0));

/** A share (0.17) as a whole percentage ("17%"), or "-" when there is none. */
const percent = (share: number | undefined) => (share === undefined ? "-" : `${fmt(100 * share, 0)}%`);

/** One measurement of `inTurns`, with the machine's load while it ran. */
export interface Turn<S, M> {
  side: S;
  /** The side's index in the list given. */
  index: number;
  /** 1-based. */
  round: number;
  measured: M;
  load: Load;
  /** PostgreSQL's checkpoints and autovacuum during the measurement ("" for none). */
  background: string;
  /** Bytes of WAL the bench PostgreSQL wrote during the measurement (none without one). */
  walBytes?: number;
}

/**
 * Measures every side once a round for `rounds` rounds, the order turning every round
 * (A B C, B C A, C A B, ...; for two sides A B, B A): no side always runs first, or always
 * right after what the same other side left behind (a checkpoint, autovacuum, a flood's
 * rate-limit rows, a warm cache). Each measurement carries the machine's load while it ran.
 */
export async function inTurns<S, M>(sides: readonly S[], rounds: number, measure: (side: S, round: number) => Promise<M>): Promise<Turn<S, M>[]> {
  const turns: Turn<S, M>[] = [];
  const watch = await watchRounds();
  try {
    for (let round = 0; round < rounds; round++) {
      const first = round % sides.length;
      const order = [...sides.entries()];
      for (const [index, side] of [...order.slice(first), ...order.slice(0, first)]) {
        const stop = await watch.start();
        const measured = await measure(side, round);
        turns.push({ side, index, round: round + 1, measured, ...(await stop()) });
      }
    }
  } finally {
    await watch.close();
  }
  return turns;
}

/**
 * Measures `sides` in alternating rounds (A B, B A, A B, ...; `ROUNDS` of each, see inTurns), printing
 * every round with the machine's load while it ran and any failed responses; the sides
 * are compared by the median of the per-round req/s ratios (first side over second).
 */
export async function alternate(title: string, sides: Side[], rounds = ROUNDS): Promise<Alternation> {
  const results: SideResult[] = sides.map((s) => ({ name: s.name, rounds: [], rps: 0, p50: 0, p99: 0, failures: 0 }));
  const turns = await inTurns(sides, rounds, (side, round) => side.measure(round));
  for (const t of turns) results[t.index]!.rounds.push({ ...t.measured, load: t.load, background: t.background, walBytes: t.walBytes });
  const serverKnown = turns.some((t) => t.measured.serverWaited !== undefined);
  const walKnown = turns.some((t) => t.walBytes !== undefined);
  const rows = turns.map(({ side, round, measured: m, load: l, background, walBytes }) => ({
    round,
    side: side.name,
    "req/s": fmt(m.rps),
    "p50 ms": fmt(m.p50, 2),
    "p99 ms": fmt(m.p99, 2),
    failures: m.failures,
    ...(serverKnown ? { "server waited": percent(m.serverWaited) } : {}),
    ...(walKnown ? { "WAL B/req": bytes(walPerRequest(walBytes, m.requests)) } : {}),
    ...loadColumns(l),
    "postgres background": background,
  }));
  console.log(`\n${title}: ${rounds} alternating round(s)`);
  table(rows);
  if (serverKnown) {
    const waits = results.flatMap((r) => {
      const shares = r.rounds.flatMap((x) => (x.serverWaited === undefined ? [] : [x.serverWaited]));
      return shares.length ? [`${r.name} ${percent(median(shares))}`] : [];
    });
    console.log(`server's main thread waited for a core (of the time it was ready to run; median of rounds): ${waits.join(", ")}`);
  }
  if (walKnown) {
    const wal = results.flatMap((r) => {
      const perRequest = r.rounds.flatMap((x) => walPerRequest(x.walBytes, x.requests) ?? []);
      return perRequest.length ? [`${r.name} ${bytes(median(perRequest))}`] : [];
    });
    console.log(`WAL written per request (all of PostgreSQL's, median of rounds, bytes): ${wal.join(", ")}`);
  }
  for (const r of results) {
    r.rps = median(r.rounds.map((x) => x.rps));
    r.p50 = median(r.rounds.map((x) => x.p50));
    r.p99 = median(r.rounds.map((x) => x.p99));
    r.failures = r.rounds.reduce((n, x) => n + x.failures, 0);
    const samples = [...new Set(r.rounds.flatMap((x) => x.samples))].slice(0, 5);
    if (r.failures > 0) console.log(`FAILED RESPONSES from ${r.name}: ${r.failures}; e.g.\n  ${samples.join("\n  ")}`);
  }
  const ratios = results.length > 1 ? roundRatios(results[0]!, results[1]!) : [];
  const disturbed = results.reduce((n, r) => n + r.rounds.filter((x) => x.load.disturbed).length, 0);
  const background = results.reduce((n, r) => n + r.rounds.filter((x) => x.background).length, 0);
  const out: Alternation = {
    title,
    sides: results,
    ratios,
    ratio: ratios.length ? median(ratios) : NaN,
    failures: results.reduce((n, r) => n + r.failures, 0),
    disturbed,
    background,
  };
  if (ratios.length) {
    console.log(
      `${results[0]!.name} / ${results[1]!.name}: median ${fmt(out.ratio, 2)}x (rounds ${ratios.map((r) => `${fmt(r, 2)}x`).join(", ")}); ` +
        `${disturbed} of ${rounds * sides.length} measurements disturbed (others > ${DISTURBED_CORES} core)` +
        `${background ? `; ${background} with a PostgreSQL checkpoint or autovacuum` : ""}${out.failures ? `; ${out.failures} FAILED responses` : ""}`,
    );
  }
  return out;
}

/**
 * Rounds of each level of `alternateAtLevels`, the comparisons with the goals against a
 * peer: five, not three. Two full runs of the same code an hour apart flipped the
 * verdict at 50 connections (exchange 1.57x, then 1.37x, against 1.5x) on one round's
 * difference; a median of five moves less with one unusual round.
 */
const LEVEL_ROUNDS = comparisonRounds(5);

/**
 * `alternate` at each concurrency in `levels`, then each side at its own peak (its best
 * median req/s over the levels): equal-concurrency ratios and the peak-to-peak ratio.
 */
export async function alternateAtLevels(title: string, levels: number[], sides: (connections: number) => Side[]) {
  const perLevel: { connections: number; result: Alternation }[] = [];
  for (const connections of levels) perLevel.push({ connections, result: await alternate(`${title}, ${connections} connections`, sides(connections), LEVEL_ROUNDS) });
  const peak = (i: number) => Math.max(...perLevel.map((l) => l.result.sides[i]!.rps));
  const peakRatio = peak(0) / peak(1);
  const names = perLevel[0]!.result.sides.map((s) => s.name);
  console.log(`${title}: peak ${names[0]} ${fmt(peak(0))} req/s, peak ${names[1]} ${fmt(peak(1))} req/s: ${fmt(peakRatio, 2)}x`);
  return { perLevel, peakRatio, failures: perLevel.reduce((n, l) => n + l.result.failures, 0) };
}

// ---------------------------------------------------------------------------------------
// Verdicts

const verdicts: { bench: string; target: string; measured: string; pass: boolean }[] = [];
let currentBench = "";
export function setCurrentBench(name: string): void {
  currentBench = name;
}

/** Prints one target's verdict and records it for the summary. */
export function verdict(target: string, measured: string, pass: boolean): boolean {
  console.log(`${pass ? "PASS" : "FAIL"}  ${target}: ${measured}`);
  verdicts.push({ bench: currentBench, target, measured, pass });
  benchResults()?.verdict(target, measured, pass);
  return pass;
}

/** The summary `npm run bench` prints last; false when any target failed. */
export function printVerdicts(): boolean {
  if (verdicts.length === 0) return true;
  console.log("\n### targets");
  table(verdicts.map((v) => ({ bench: v.bench, target: v.target, measured: v.measured, verdict: v.pass ? "PASS" : "FAIL" })));
  return verdicts.every((v) => v.pass);
}

// ---------------------------------------------------------------------------------------
// Small helpers

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

/** Prints a table, and records its rows in the run's results (bench/results.ts). */
export function table(rows: Record<string, string | number>[]): void {
  const results = benchResults();
  if (!results) return console.table(rows);
  results.table(rows);
  results.quietly(() => console.table(rows));
}

export const fmt = (n: number, digits = 1) => Number(n.toFixed(digits));

/**
 * An agent budget made as an agent makes one (agent.budget.create on /mcp/treasury with
 * the owner's step-up grant), funded by the operator, and a grant on its vault: what the
 * agent benches pay and simulate with. `caps` are the tool's cap arguments; `user` owns the
 * parent vault (a fresh user when left out).
 */
export async function fundedAgentBudget(
  admin: CoreClients,
  gatewayUrl: string,
  o: { scopes: string[]; caps: Record<string, number>; fundCents: bigint; user?: { userId: string; vaultId: string } },
) {
  const user = o.user ?? (await admin.partners.createUser({ email: `bench-${randomBytes(6).toString("hex")}@example.test` }));
  const parentToken = (await admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: o.scopes, stepUp: true })).token!.accessToken;
  const res = await fetch(`${gatewayUrl}/mcp/treasury`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${parentToken}` },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "agent.budget.create",
      params: { purpose: "custom", display_name: "bench", ...o.caps, chain_allowlist: ["base"], idempotency_key: "bench-budget-0001" },
    }),
  });
  const body = (await res.json()) as { result?: { vault_id: string } };
  if (!body.result) throw new Error(`agent.budget.create failed: ${JSON.stringify(body)}`);
  const vaultId = body.result.vault_id;
  await admin.budgets.fundVault({ vaultId, amountCents: o.fundCents });
  const agentToken = (await admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: o.scopes, stepUp: false })).token!.accessToken;
  return { parentToken, agentToken, vaultId };
}
