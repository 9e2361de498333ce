/** Knobs, verdicts and small statistics every bench and the load generator share. */
import { benchResults } from "./results.js";

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
 * Rounds for comparisons whose sides measure nearly alike and whose line sits near 1.0x:
 * each ratio is then mostly machine noise, and fewer rounds let the median flip the verdict.
 */
export const NEAR_ONE_ROUNDS = comparisonRounds(9);

/** Seconds of one measurement: `full` normally, 2 with BENCH_QUICK, or BENCH_SECONDS. */
export function seconds(full: number): number {
  return Number(process.env.BENCH_SECONDS ?? (QUICK ? 2 : full));
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
  if (!results) {
    console.table(rows);
    return;
  }
  results.table(rows);
  results.quietly(() => console.table(rows));
}

export const fmt = (n: number, digits = 1) => Number(n.toFixed(digits));
