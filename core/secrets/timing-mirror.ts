import { randomInt } from "node:crypto";
import { performance } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * Recent durations of database work a known client's check does and an unknown client id's
 * skips (a counted attempt, a failure's audit write). An unknown id's check waits one of
 * them, drawn at random, so both still take the same time without touching the database.
 */
export function createTimingMirror(size = 64) {
  const samples: number[] = [];
  let next = 0;
  // A timer fires late (whole milliseconds, then the event loop): its average lateness is
  // taken off the next wait, so waits match the work they stand for on average.
  let late = 0;
  const record = (ms: number) => {
    if (samples.length < size) samples.push(ms);
    else samples[next] = ms;
    next = (next + 1) % size;
  };
  return {
    /** Runs `work` and keeps how long it took. */
    async time<T>(work: () => Promise<T>): Promise<T> {
      const started = performance.now();
      try {
        return await work();
      } finally {
        record(performance.now() - started);
      }
    },
    /** Waits about as long as one of the recent durations (nothing before any was kept). */
    async wait(): Promise<void> {
      if (samples.length === 0) return;
      const want = samples[randomInt(samples.length)]!;
      const target = want - late;
      if (target < 0.5) {
        late = Math.max(0, late - want * 0.1);
        return;
      }
      const started = performance.now();
      await sleep(target);
      late = late * 0.9 + (performance.now() - started - target) * 0.1;
    },
  };
}

export type TimingMirror = ReturnType<typeof createTimingMirror>;
