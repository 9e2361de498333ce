/** Reads the machine's load around a measurement (the arithmetic is bench/machine-load.ts). */
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { fmt } from "./basics.js";
import {
  loadBetween,
  parseCpuLine,
  parseIoFull,
  parseSchedstat,
  parseStat,
  type CpuSnapshot,
  type Load,
  type ProcSample,
  type ThreadSched,
} from "./machine-load.js";

/** Processes of the system under test besides the bench's own (the bench PostgreSQL's postmaster). */
export const benchRoots = new Set<number>();

// ---------------------------------------------------------------------------------------
// Machine load: CPU of every process that is not part of the bench

export function parentOf(pid: number): number | undefined {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, "utf8")).ppid;
  } catch {
    return undefined;
  }
}

/**
 * This process's ancestors that only launched the bench (npm, its `sh -c`, scripts/bench.mjs):
 * their CPU is the bench's own. The walk stops at the operator's shell.
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
export function mainThreadSched(pid: number): ThreadSched | undefined {
  try {
    return parseSchedstat(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8"));
  } catch {
    return undefined;
  }
}

const PROBE_INPUT = Buffer.alloc(16 * 1024, 7);

/**
 * How fast the CPU is right now: the best of three timings of fixed work. On a virtual
 * machine a busy host slows work without all of it showing as steal.
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
