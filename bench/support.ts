import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import autocannon from "autocannon";
import { createScratchDatabase } from "../test/support/db.js";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../scripts/pg-throwaway.sh", import.meta.url));

const BENCH_PG_DIR = "/tmp/vaultgate-bench-pg";
let server: Promise<string> | undefined;
let started = false;

/**
 * A real PostgreSQL for benchmarks: BENCH_DATABASE_URL, or a throwaway server started
 * once per bench run (Debian's packages; installed if missing).
 */
export function benchPostgres(): Promise<string> {
  server ??= process.env.BENCH_DATABASE_URL
    ? Promise.resolve(process.env.BENCH_DATABASE_URL)
    : run("bash", [script, "start", BENCH_PG_DIR, "55499"]).then((r) => ((started = true), r.stdout.trim()));
  return server;
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
    process.env.TEST_DATABASE_URL = previous;
  }
}

export interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  non2xx: number;
}

/** autocannon with our defaults; only ever against 127.0.0.1. */
export async function load(options: autocannon.Options): Promise<LoadResult> {
  if (!/^http:\/\/127\.0\.0\.1[:/]/.test(String(options.url))) throw new Error("benchmarks only target 127.0.0.1");
  const result = await autocannon({ duration: 8, ...options });
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, errors: result.errors, non2xx: result.non2xx };
}

export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export function percentile(values: number[], p: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

export function table(rows: Record<string, string | number>[]): void {
  console.table(rows);
}

export const fmt = (n: number, digits = 1) => Number(n.toFixed(digits));
