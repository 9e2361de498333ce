import { expect } from "chai";
import { readFileSync } from "node:fs";
import {
  DISTURBED_CORES,
  HZ,
  descendants,
  loadBetween,
  parseCpuLine,
  parseIoFull,
  parseSchedstat,
  parseStat,
  waitedShare,
  type CpuSnapshot,
  type ProcSample,
} from "../../bench/machine-load.js";

/** A /proc/<pid>/stat line with the fields the bench reads; the rest are zeros. */
function statLine(pid: number, comm: string, p: { ppid: number; utime: number; stime: number; cutime?: number; cstime?: number; start: number }): string {
  const fields = new Array<string>(50).fill("0"); // fields 3.. of the line
  fields[0] = "S";
  fields[1] = String(p.ppid);
  fields[11] = String(p.utime);
  fields[12] = String(p.stime);
  fields[13] = String(p.cutime ?? 0);
  fields[14] = String(p.cstime ?? 0);
  fields[19] = String(p.start);
  return `${pid} (${comm}) ${fields.join(" ")}`;
}

const proc = (ppid: number, ticks: number, start: number, comm = "p", reaped = 0): ProcSample => ({ ppid, ticks, reaped, comm, start });

/** A snapshot `seconds` into the run, the machine busy `busy` ticks and `steal` of them stolen; `ioFull` null: no PSI. */
function snap(seconds: number, busy: number, procs: [number, ProcSample][], steal = 0, ioFull: number | null = 0): CpuSnapshot {
  return { at: seconds * 1000, busy, steal, ioFull: ioFull ?? undefined, procs: new Map(procs) };
}

const BENCH = 100; // the bench process (a root)
const probes: [number, number] = [1.1, 1.2];

describe("bench machine load: what the per-round load columns mean", () => {
  describe("reading /proc", () => {
    it("parses a stat line whose command holds spaces and parentheses", () => {
      const p = parseStat(statLine(4242, "tmux: server (1) x", { ppid: 7, utime: 120, stime: 30, cutime: 5, cstime: 6, start: 98765 }));
      expect(p).to.deep.equal({ ppid: 7, ticks: 150, reaped: 11, comm: "tmux: server (1) x", start: 98765 });
    });

    it("parses this process's own stat line", () => {
      const p = parseStat(readFileSync("/proc/self/stat", "utf8"));
      expect(p.ppid).to.equal(process.ppid);
      expect(p.start).to.be.greaterThan(0);
      expect(Number.isInteger(p.ticks)).to.equal(true);
    });

    it("counts user, nice, system, irq, softirq and steal as busy; idle and iowait are not", () => {
      // cpu  user nice system idle iowait irq softirq steal guest guest_nice
      const line = "cpu  1000 20 300 99999 77 4 5 60 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
      expect(parseCpuLine(line)).to.deep.equal({ busy: 1000 + 20 + 300 + 4 + 5 + 60, steal: 60 });
    });

    it("takes the full total from pressure stall information, and nothing when it is absent", () => {
      const pressure = "some avg10=0.00 avg60=0.12 avg300=0.30 total=9876543\nfull avg10=0.00 avg60=0.05 avg300=0.10 total=1234567\n";
      expect(parseIoFull(pressure)).to.equal(1234567);
      expect(parseIoFull("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")).to.equal(undefined);
      expect(parseIoFull("")).to.equal(undefined);
    });
  });

  describe("who belongs to the bench", () => {
    it("is the roots and every descendant, not their parents or siblings", () => {
      const procs = new Map<number, ProcSample>([
        [1, proc(0, 0, 1)],
        [BENCH, proc(1, 0, 10)],
        [101, proc(BENCH, 0, 11)],
        [102, proc(101, 0, 12)],
        [200, proc(1, 0, 13)], // a postmaster root
        [201, proc(200, 0, 14)],
        [300, proc(1, 0, 15)], // unrelated
      ]);
      expect([...descendants(procs, [BENCH, 200])].sort((a, b) => a - b)).to.deep.equal([100, 101, 102, 200, 201]);
    });
  });

  describe("loadBetween", () => {
    it("charges an outside process only what it used during the round, in cores", () => {
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [300, proc(1, 5000, 20, "cron")],
      ]);
      const after = snap(2, 2 * HZ, [
        [BENCH, proc(1, 150, 10)],
        [300, proc(1, 5000 + 20, 20, "cron")],
      ]);
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.machine).to.be.closeTo(1.0, 1e-9);
      expect(l.others).to.be.closeTo(0.1, 1e-9); // 20 ticks over 2 s, not its 50 s of history
      expect(l.top).to.deep.equal({ name: "cron[300]", cores: 0.1 });
      expect(l.disturbed).to.equal(false); // exactly at the mark is not over it
      expect(l.probeMs).to.deep.equal(probes);
    });

    it("keeps charging a kernel worker by its delta when it renames itself", () => {
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [44, proc(2, 90_000, 5, "kworker/1:1H-kblockd")],
      ]);
      const after = snap(1, HZ, [
        [BENCH, proc(1, 90, 10)],
        [44, proc(2, 90_000 + 3, 5, "kworker/1:1H-events")],
      ]);
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.others).to.be.closeTo(0.03, 1e-9);
      expect(l.top?.name).to.equal("kworker/1:1H-events[44]");
    });

    it("charges all the time of a new process that reuses a pid (a different start time)", () => {
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [500, proc(1, 1_000_000, 30, "old")],
      ]);
      const after = snap(1, HZ, [
        [BENCH, proc(1, 50, 10)],
        [500, proc(1, 40, 31_000, "new")],
      ]);
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.others).to.be.closeTo(0.4, 1e-9);
      expect(l.top?.name).to.equal("new[500]");
      expect(l.disturbed).to.equal(true);
    });

    it("never charges the bench's own children, even ones born during the round, and ignores an outsider's reaped children", () => {
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [600, proc(1, 100, 40, "make", 0)],
      ]);
      const after = snap(1, 1.5 * HZ, [
        [BENCH, proc(1, 40, 10)],
        [101, proc(BENCH, 90, 900, "loadgen")], // started during the round
        [600, proc(1, 101, 40, "make", 5_000)], // reaped a compiler that ran for 50 s
      ]);
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.others).to.be.closeTo(0.01, 1e-9);
      expect(l.top?.name).to.equal("make[600]");
    });

    it("caps outside processes at what the machine did beyond the bench", () => {
      // /proc/<pid>/stat and /proc/stat are read a moment apart: a process's ticks can run
      // ahead of the machine's. Others can never exceed busy - steal - bench.
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [300, proc(1, 0, 20, "x")],
      ]);
      const after = snap(1, HZ, [
        [BENCH, proc(1, 80, 10)],
        [300, proc(1, 50, 20, "x")],
      ]);
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.others).to.be.closeTo(0.2, 1e-9);
    });

    it("counts host steal as outside use and names it when it is the largest", () => {
      const before = snap(
        0,
        0,
        [
          [BENCH, proc(1, 0, 10)],
          [300, proc(1, 0, 20, "x")],
        ],
        0,
      );
      const after = snap(
        1,
        HZ,
        [
          [BENCH, proc(1, 60, 10)],
          [300, proc(1, 2, 20, "x")],
        ],
        30,
      );
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.others).to.be.closeTo(0.02 + 0.3, 1e-9);
      expect(l.top).to.deep.equal({ name: "host steal", cores: 0.3 });
      expect(l.disturbed).to.equal(true);
    });

    it("names nobody when nothing outside the bench ran", () => {
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [300, proc(1, 7, 20)],
      ]);
      const after = snap(1, HZ, [
        [BENCH, proc(1, 100, 10)],
        [300, proc(1, 7, 20)],
      ]);
      const l = loadBetween(before, after, [BENCH], probes);
      expect(l.others).to.equal(0);
      expect(l.top).to.equal(undefined);
      expect(l.disturbed).to.equal(false);
    });

    it("reports the disk stall in ms, and nothing when either reading lacks it", () => {
      const base = [[BENCH, proc(1, 0, 10)]] as [number, ProcSample][];
      expect(loadBetween(snap(0, 0, base, 0, 1_000_000), snap(1, 0, base, 0, 1_250_500), [BENCH], probes).ioStallMs).to.equal(250.5);
      expect(loadBetween(snap(0, 0, base, 0, null), snap(1, 0, base, 0, 5), [BENCH], probes).ioStallMs).to.equal(undefined);
    });

    it("marks a round disturbed just over a tenth of a core", () => {
      expect(DISTURBED_CORES).to.equal(0.1);
      const before = snap(0, 0, [
        [BENCH, proc(1, 0, 10)],
        [300, proc(1, 0, 20)],
      ]);
      const after = snap(10, 10 * HZ, [
        [BENCH, proc(1, 0, 10)],
        [300, proc(1, 101, 20)],
      ]);
      expect(loadBetween(before, after, [BENCH], probes).disturbed).to.equal(true);
    });
  });

  describe("the server thread's wait for a core", () => {
    it("reads the time on a core and the time ready but waiting from a schedstat line", () => {
      expect(parseSchedstat("5123456789 912345678 40211\n")).to.deep.equal({ onCpuNs: 5123456789, waitNs: 912345678 });
    });

    it("refuses what is not a schedstat line (a kernel without the counters leaves the column empty)", () => {
      for (const text of ["", "\n", "1 2", "1 2 3 4", "a b c", "1 -2 3"]) expect(parseSchedstat(text), JSON.stringify(text)).to.equal(undefined);
    });

    it("is the share of the time the thread wanted a core that it spent waiting", () => {
      const before = { onCpuNs: 10e9, waitNs: 1e9 };
      expect(waitedShare(before, { onCpuNs: 14e9, waitNs: 2e9 })).to.equal(0.2);
      expect(waitedShare(before, { onCpuNs: 13e9, waitNs: 1e9 })).to.equal(0);
    });

    it("has no share without both readings, for a thread that never wanted a core, or for counters that went back (a new process under the pid)", () => {
      const r = { onCpuNs: 10e9, waitNs: 1e9 };
      expect(waitedShare(undefined, r)).to.equal(undefined);
      expect(waitedShare(r, undefined)).to.equal(undefined);
      expect(waitedShare(r, { ...r })).to.equal(undefined);
      expect(waitedShare(r, { onCpuNs: 1e9, waitNs: 2e9 })).to.equal(undefined);
    });
  });
});
