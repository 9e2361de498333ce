/**
 * How busy the machine was during a round, from two /proc readings: the bench's CPU, everyone
 * else's (steal included) and disk waits. Only arithmetic here, so it can be tested on made-up
 * readings; bench/machine-watch.ts does the reading.
 */

/** USER_HZ, the unit of /proc's CPU times on Linux. */
export const HZ = 100;
/** Other processes may use up to this many cores during a round before it is marked disturbed. */
export const DISTURBED_CORES = 0.1;

export interface ProcSample {
  ppid: number;
  /** utime + stime: the process's own CPU. */
  ticks: number;
  /** cutime + cstime: CPU of its children that it has reaped (counted when reaped). */
  reaped: number;
  comm: string;
  /** When the process started (clock ticks after boot): with the pid, who it is. */
  start: number;
}

export interface CpuSnapshot {
  /** performance.now() when it was taken. */
  at: number;
  /** Ticks the whole machine was busy (/proc/stat). */
  busy: number;
  /** Ticks the hypervisor gave to others while this machine wanted them (/proc/stat steal). */
  steal: number;
  /** Microseconds during which every non-idle task waited for I/O (/proc/pressure/io "full"); undefined without PSI. */
  ioFull: number | undefined;
  procs: Map<number, ProcSample>;
}

export interface Load {
  /** Cores the whole machine was busy (from /proc/stat). */
  machine: number;
  /**
   * Cores used by processes outside the bench (per-process times from /proc/<pid>/stat),
   * plus the cores the hypervisor took for other machines (steal).
   */
  others: number;
  /** The busiest outside process (`comm[pid]`), or "host steal" when steal was larger; undefined when nothing else ran. */
  top: { name: string; cores: number } | undefined;
  /**
   * Milliseconds of the round during which every task that wanted to run waited for the
   * disk (Linux pressure stall information); undefined where the kernel does not report it.
   */
  ioStallMs: number | undefined;
  /** The CPU probe just before and just after the round, in ms. */
  probeMs: [before: number, after: number];
  disturbed: boolean;
}

/** One /proc/<pid>/stat line. */
export function parseStat(text: string): ProcSample {
  // comm may contain spaces and parentheses: fields start after the last ')'.
  const close = text.lastIndexOf(")");
  const comm = text.slice(text.indexOf("(") + 1, close);
  const f = text.slice(close + 2).split(" ");
  // f[0] = state (field 3), so field n is f[n - 3]: ppid 4, utime 14, stime 15, cutime 16,
  // cstime 17, starttime 22.
  return { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]), comm, start: Number(f[19]) };
}

/** The machine's busy and steal ticks from /proc/stat's first ("cpu") line. */
export function parseCpuLine(procStat: string): { busy: number; steal: number } {
  const cpu = procStat.split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = cpu;
  return { busy: user + nice + system + irq + softirq + steal, steal };
}

/** The "full" total of /proc/pressure/io, in microseconds; undefined when absent. */
export function parseIoFull(pressure: string): number | undefined {
  const full = /^full .*total=(\d+)/m.exec(pressure);
  return full ? Number(full[1]) : undefined;
}

/** The same process in two snapshots: same pid and start time (a kernel worker's name changes with its work). */
const sameProcess = (was: ProcSample | undefined, now: ProcSample): was is ProcSample => was !== undefined && was.start === now.start;

/** The given pids and all their descendants. */
export function descendants(procs: Map<number, ProcSample>, roots: Iterable<number>): Set<number> {
  const children = new Map<number, number[]>();
  for (const [pid, p] of procs) {
    const siblings = children.get(p.ppid);
    if (siblings) siblings.push(pid);
    else children.set(p.ppid, [pid]);
  }
  const out = new Set<number>();
  const stack = [...roots];
  while (stack.length) {
    const pid = stack.pop()!;
    if (out.has(pid)) continue;
    out.add(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  return out;
}

/**
 * The load between two snapshots. `roots` are the bench's own processes (this process
 * and the bench PostgreSQL's postmaster); they and their descendants in either snapshot
 * are the bench, everything else is "others".
 */
export function loadBetween(before: CpuSnapshot, after: CpuSnapshot, roots: Iterable<number>, probeMs: [number, number]): Load {
  const rootList = [...roots];
  const seconds = (after.at - before.at) / 1000;
  const ours = new Set([...descendants(before.procs, rootList), ...descendants(after.procs, rootList)]);
  let othersTicks = 0;
  let benchTicks = 0;
  let topTicks = 0;
  let top = "";
  for (const [pid, p] of after.procs) {
    const was = before.procs.get(pid);
    if (ours.has(pid)) {
      // The bench's own short-lived children (load generators, backends) are reaped by it.
      benchTicks += sameProcess(was, p) ? p.ticks + p.reaped - was.ticks - was.reaped : p.ticks + p.reaped;
      continue;
    }
    // Others: their own CPU only (a reaped child's time lands in its parent at once).
    // A process first seen now (or a reused pid) started during the round: all its time is new.
    const delta = sameProcess(was, p) ? p.ticks - was.ticks : p.ticks;
    if (delta <= 0) continue;
    othersTicks += delta;
    if (delta > topTicks) {
      topTicks = delta;
      top = `${p.comm}[${pid}]`;
    }
  }
  const cores = (ticks: number) => (seconds > 0 ? ticks / HZ / seconds : 0);
  const machine = cores(after.busy - before.busy);
  const steal = cores(after.steal - before.steal);
  // Never more than the machine did beyond the bench (and beyond what the host took).
  const processes = Math.min(cores(othersTicks), Math.max(0, machine - steal - cores(benchTicks)));
  const others = processes + steal;
  const busiest = steal > 0 && steal > cores(topTicks) ? { name: "host steal", cores: steal } : top ? { name: top, cores: cores(topTicks) } : undefined;
  return {
    machine,
    others,
    top: busiest,
    ioStallMs: before.ioFull === undefined || after.ioFull === undefined ? undefined : (after.ioFull - before.ioFull) / 1000,
    probeMs,
    disturbed: others > DISTURBED_CORES,
  };
}

/**
 * One thread's scheduler counters, from /proc/<pid>/task/<tid>/schedstat: nanoseconds it
 * ran on a core, and nanoseconds it was ready to run but waited while other tasks had
 * every core.
 */
export interface ThreadSched {
  onCpuNs: number;
  waitNs: number;
}

/** A schedstat line ("<on cpu ns> <waiting ns> <timeslices>"); undefined when it is not one. */
export function parseSchedstat(text: string): ThreadSched | undefined {
  const fields = text.trim().split(/\s+/);
  if (fields.length !== 3 || !fields.every((f) => /^\d+$/.test(f))) return undefined;
  return { onCpuNs: Number(fields[0]), waitNs: Number(fields[1]) };
}

/**
 * Of the time a thread wanted a core between two readings, the share it spent waiting for
 * one: 0 when it always had a core at once, 0.2 when a fifth of its time ready to run went
 * to other tasks. Undefined when a reading is missing or the thread never wanted a core.
 */
export function waitedShare(before: ThreadSched | undefined, after: ThreadSched | undefined): number | undefined {
  if (!before || !after) return undefined;
  const ran = after.onCpuNs - before.onCpuNs;
  const waited = after.waitNs - before.waitNs;
  if (ran < 0 || waited < 0 || ran + waited === 0) return undefined;
  return waited / (ran + waited);
}
