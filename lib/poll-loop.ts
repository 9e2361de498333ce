/** Schedules a callback after a delay and cancels it; a test passes its own to fire passes by hand. */
export interface PollTimer {
  set(fire: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export interface PollLoopOptions {
  /** The wait between the end of one pass and the start of the next; 0 or less: no loop (the loop only answers stop). */
  intervalMs: number;
  /** One pass of work; the next is scheduled only once it has settled, so passes never overlap. */
  pass: () => Promise<unknown>;
  /** A pass that failed: reported here, and the loop goes on. */
  onError: (err: unknown) => void;
  timer?: PollTimer;
}

export interface PollLoop {
  /** True once stop was called: a pass should end early and no further pass starts. */
  readonly stopped: boolean;
  /** Starts no further pass and resolves once the pass in flight (if any) has settled. */
  stop(): Promise<void>;
}

/** Timers that do not keep the process alive: a loop alone never holds off exit. */
const unrefTimer: PollTimer = {
  set: (fire, ms) => setTimeout(fire, ms).unref(),
  clear: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Runs `pass` every `intervalMs` after the previous one ends, until stopped. */
export function pollLoop(options: PollLoopOptions): PollLoop {
  const timer = options.timer ?? unrefTimer;
  let stopped = false;
  let handle: unknown;
  let current: Promise<unknown> = Promise.resolve();

  const report = (err: unknown) => {
    try {
      options.onError(err);
    } catch {
      // A failing reporter must not end the loop either.
    }
  };

  function schedule() {
    if (stopped || options.intervalMs <= 0) return;
    handle = timer.set(() => {
      handle = undefined;
      current = Promise.resolve()
        .then(() => options.pass())
        .catch(report)
        .finally(schedule);
    }, options.intervalMs);
  }
  schedule();

  return {
    get stopped() {
      return stopped;
    },
    async stop() {
      stopped = true;
      if (handle !== undefined) timer.clear(handle);
      handle = undefined;
      await current.catch(() => {});
    },
  };
}
