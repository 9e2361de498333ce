/**
 * The record of one `npm run bench`: every printed line, table and verdict, with the commit,
 * machine and settings, as one JSON file per run in bench-results/ (not committed).
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { format } from "node:util";

export interface VerdictRecord {
  target: string;
  /** The measurement as printed ("1.57x (rounds 1.52, 1.61, 1.57)"). */
  measured: string;
  /** Every number in `measured`, in order (the first is the one judged). */
  numbers: number[];
  pass: boolean;
}

export interface BenchRecord {
  name: string;
  startedAt: string;
  finishedAt?: string;
  /** Every line the bench printed, as printed (tables are in `tables`). */
  lines: string[];
  tables: Record<string, string | number>[][];
  verdicts: VerdictRecord[];
  /** The error that ended the bench early, if one did. */
  error?: string;
}

export interface RunSettings {
  /** The benches named on the command line (all when empty). */
  wanted: string[];
  quick: boolean;
  rounds: number;
  /** Seconds of one measurement when set for all (BENCH_SECONDS, or 2 with BENCH_QUICK); null: each bench's own. */
  seconds: number | null;
}

export interface RunRecord {
  startedAt: string;
  finishedAt?: string;
  git: { commit: string | null; dirty: boolean | null };
  machine: { cpus: number; cpuModel: string; memoryBytes: number; node: string; platform: string; arch: string };
  settings: RunSettings;
  benches: BenchRecord[];
  /** False when any target failed or a bench ended with an error. */
  passed?: boolean;
}

/** The numbers in a printed measurement: "1.57x (rounds 1.52, 1.61)" -> [1.57, 1.52, 1.61]. */
export function numbersIn(text: string): number[] {
  return [...text.matchAll(/-?\d+(?:\.\d+)?(?:e[+-]?\d+)?/gi)].map((m) => Number(m[0]));
}

function git(args: string[], cwd: string): string | null {
  try {
    return execFileSync("git", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return null;
  }
}

export class BenchResults {
  readonly run: RunRecord;
  private current: BenchRecord | undefined;
  private muted = 0;

  constructor(settings: RunSettings, repo: string, now = new Date()) {
    const commit = git(["rev-parse", "HEAD"], repo);
    const status = commit === null ? null : git(["status", "--porcelain"], repo);
    this.run = {
      startedAt: now.toISOString(),
      git: { commit, dirty: status === null ? null : status.length > 0 },
      machine: {
        cpus: cpus().length,
        cpuModel: cpus()[0]?.model ?? "",
        memoryBytes: totalmem(),
        node: process.version,
        platform: process.platform,
        arch: process.arch,
      },
      settings,
      benches: [],
    };
  }

  /** Starts the record of bench `name`; what is printed from now on is its. */
  begin(name: string): void {
    this.end();
    this.current = { name, startedAt: new Date().toISOString(), lines: [], tables: [], verdicts: [] };
    this.run.benches.push(this.current);
  }

  /** Ends the current bench's record, with the error that ended it early if one did. */
  end(error?: unknown): void {
    if (!this.current) return;
    this.current.finishedAt = new Date().toISOString();
    if (error !== undefined) this.current.error = error instanceof Error ? error.message : String(error);
    this.current = undefined;
  }

  /** A printed line (console.log's arguments). Lines outside a bench are not kept. */
  line(...args: unknown[]): void {
    if (this.muted === 0) this.current?.lines.push(format(...args));
  }

  table(rows: Record<string, string | number>[]): void {
    this.current?.tables.push(rows.map((r) => ({ ...r })));
  }

  verdict(target: string, measured: string, pass: boolean): void {
    this.current?.verdicts.push({ target, measured, numbers: numbersIn(measured), pass });
  }

  /** Runs `print` without recording its lines (a table printed and recorded as rows). */
  quietly(print: () => void): void {
    this.muted++;
    try {
      print();
    } finally {
      this.muted--;
    }
  }

  /** Writes the run to `dir`/<start time>.json and returns the file's path. */
  write(dir: string, now = new Date()): string {
    this.end();
    this.run.finishedAt = now.toISOString();
    this.run.passed = this.run.benches.every((b) => b.error === undefined && b.verdicts.every((v) => v.pass));
    mkdirSync(dir, { recursive: true });
    // The start time in ISO form, colons made dashes so the name is a file name everywhere.
    const file = join(dir, `${this.run.startedAt.replaceAll(":", "-")}.json`);
    writeFileSync(file, `${JSON.stringify(this.run, null, 2)}\n`);
    return file;
  }
}

let active: BenchResults | undefined;

/** The collector of the running `npm run bench` (bench/run.ts), if any. */
export function benchResults(): BenchResults | undefined {
  return active;
}

export function setBenchResults(results: BenchResults | undefined): void {
  active = results;
}
