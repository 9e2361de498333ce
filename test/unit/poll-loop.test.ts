import { expect } from "chai";
import { pollLoop, type PollTimer } from "../../lib/poll-loop.js";

/** A timer fired by hand: the test sees every wait the loop asks for and decides when it ends. */
function manualTimer() {
  const waits: { fire: () => void; ms: number; cleared: boolean; fired: boolean }[] = [];
  const timer: PollTimer = {
    set(fire, ms) {
      const w = { fire, ms, cleared: false, fired: false };
      waits.push(w);
      return w;
    },
    clear(handle) {
      (handle as { cleared: boolean }).cleared = true;
    },
  };
  const open = () => waits.filter((w) => !w.cleared && !w.fired);
  const fire = () => {
    const [w, ...rest] = open();
    expect(w, "a wait to fire").to.not.equal(undefined);
    expect(rest).to.have.length(0);
    w!.fired = true;
    w!.fire();
  };
  return { timer, waits, open, fire };
}

/** A pass the test ends by hand. */
function gate() {
  let release!: (err?: Error) => void;
  const done = new Promise<void>((resolve, reject) => {
    release = (err) => (err ? reject(err) : resolve());
  });
  return { done, release };
}

/** A loop on a hand-fired timer. */
const handLoop = (t: ReturnType<typeof manualTimer>, pass: () => Promise<unknown>, more: { intervalMs?: number; onError?: (err: unknown) => void } = {}) =>
  pollLoop({ intervalMs: more.intervalMs ?? 5, timer: t.timer, onError: more.onError ?? (() => {}), pass });

/** Lets every queued promise callback run (no clock involved). */
const settle = async () => {
  for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
};

describe("pollLoop: the background pass loop the workers share", () => {
  it("waits the interval before each pass, counted from the end of the previous one", async () => {
    const t = manualTimer();
    let passes = 0;
    const loop = handLoop(t, async () => void passes++, { intervalMs: 250 });
    expect(passes).to.equal(0);
    expect(t.open().map((w) => w.ms)).to.deep.equal([250]);
    t.fire();
    await settle();
    expect(passes).to.equal(1);
    expect(t.open().map((w) => w.ms)).to.deep.equal([250]);
    t.fire();
    await settle();
    expect(passes).to.equal(2);
    await loop.stop();
  });

  it("never overlaps passes: no wait is scheduled while a pass is in flight", async () => {
    const t = manualTimer();
    const gates: ReturnType<typeof gate>[] = [];
    let inFlight = 0;
    let most = 0;
    const loop = handLoop(t, async () => {
      inFlight++;
      most = Math.max(most, inFlight);
      const g = gate();
      gates.push(g);
      await g.done;
      inFlight--;
    });
    for (let i = 0; i < 3; i++) {
      t.fire();
      await settle();
      expect(t.open(), "no next wait while the pass runs").to.have.length(0);
      gates[i]!.release();
      await settle();
      expect(t.open()).to.have.length(1);
    }
    expect(most).to.equal(1);
    await loop.stop();
  });

  it("a failing pass is reported and the loop goes on, whether it rejects or throws", async () => {
    const t = manualTimer();
    const errors: unknown[] = [];
    let n = 0;
    const loop = pollLoop({
      intervalMs: 5,
      timer: t.timer,
      onError: (err) => {
        errors.push(err);
        throw new Error("the reporter fails too");
      },
      pass: () => {
        n++;
        if (n === 1) return Promise.reject(new Error("database down"));
        if (n === 2) throw new Error("thrown before any await");
        return Promise.resolve();
      },
    });
    for (let i = 0; i < 3; i++) {
      t.fire();
      await settle();
    }
    expect(n).to.equal(3);
    expect(errors.map((e) => (e as Error).message)).to.deep.equal(["database down", "thrown before any await"]);
    expect(t.open()).to.have.length(1);
    await loop.stop();
  });

  it("stop during a pass waits for that pass, and no pass starts after it", async () => {
    const t = manualTimer();
    const g = gate();
    let passes = 0;
    let sawStopped = false;
    const loop = handLoop(t, async () => {
      passes++;
      try {
        await g.done;
      } finally {
        sawStopped = loop.stopped;
      }
    });
    t.fire();
    await settle();
    let stopped = false;
    const stopping = loop.stop().then(() => {
      stopped = true;
    });
    await settle();
    expect(stopped, "stop resolved while the pass was still running").to.equal(false);
    expect(loop.stopped).to.equal(true);
    g.release(new Error("the pass fails as it ends"));
    await stopping;
    expect(sawStopped, "the pass could see the loop was stopping").to.equal(true);
    expect(t.open(), "no wait after stop").to.have.length(0);
    expect(passes).to.equal(1);
  });

  it("stop between passes cancels the wait; an interval of 0 runs no pass at all", async () => {
    const t = manualTimer();
    let passes = 0;
    const loop = handLoop(t, async () => void passes++);
    await loop.stop();
    expect(t.waits).to.have.length(1);
    expect(t.waits[0]!.cleared).to.equal(true);
    expect(passes).to.equal(0);

    const idle = manualTimer();
    const none = handLoop(idle, async () => void passes++, { intervalMs: 0 });
    expect(idle.waits).to.have.length(0);
    await none.stop();
    expect(passes).to.equal(0);
  });

  it("with real timers, passes keep coming until stop", async () => {
    let passes = 0;
    const enough = gate();
    const loop = pollLoop({
      intervalMs: 1,
      onError: () => {},
      pass: async () => {
        if (++passes === 3) enough.release();
      },
    });
    await enough.done;
    await loop.stop();
    const after = passes;
    await settle();
    expect(passes).to.equal(after);
  });
});
