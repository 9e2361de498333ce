import { performance } from "node:perf_hooks";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { abandoned, canAbort } from "../deadlines.js";
import { secretChecksAbandoned, secretChecksActive, secretChecksQueued, secretChecksShed, secretDerivations } from "../observability/metrics.js";

/**
 * Who a derivation is done for. A known client's checks form one flow (its client id);
 * checks for client ids nobody registered form one flow per client address. Operator
 * hashing is known work too.
 */
export interface SecretFlow {
  known: boolean;
  key: string;
}

export type FlowClass = "known" | "unknown";

export interface FairGateOptions {
  /** Derivations running at once. */
  max: number;
  /** Waiting derivations in all; one more sheds a waiter of the longest flow. */
  maxQueue: number;
  /** Waiting derivations of one flow; one more of that flow is shed. */
  maxPerFlow: number;
  /** A derivation expected to wait longer than this, or that did, is shed. */
  maxWaitMs: number;
}

interface Waiter {
  start: () => void;
  shed: () => void;
  enqueuedAt: number;
}

interface Flow {
  id: string;
  cls: FlowClass;
  waiters: Waiter[];
}

/** Refuses a check whose caller's deadline passed (or who left) before it queued: counted, never derived. */
export function leftBefore(signal: AbortSignal): never {
  secretChecksAbandoned.inc();
  throw abandoned(signal, "before a secret check");
}

/**
 * Serves waiting flows round-robin, known and unknown clients in turn, so a flood of made-up client
 * ids gets at most every other derivation. Shedding hits the flow that asked too much.
 */
export function createFairGate(o: FairGateOptions) {
  let active = 0;
  let queued = 0;
  const flows = new Map<string, Flow>();
  // Flows with waiters, in the order their next turn comes.
  const rings: Record<FlowClass, Flow[]> = { known: [], unknown: [] };
  let lastClass: FlowClass = "unknown";
  // Moving average of one derivation's wall time, seeded pessimistically (first calls).
  let avgMs = 20;

  const overloaded = (waitMs: number): never => {
    secretChecksShed.inc();
    return fail(Reason.OVERLOADED, "too many credential checks in progress; retry shortly", {
      retryAfterSeconds: Math.min(30, Math.max(1, Math.ceil(waitMs / 1000))),
    });
  };
  const drainEstimate = (ahead: number) => ((ahead + 1) / o.max) * avgMs;
  const queuedInClass = (c: FlowClass) => rings[c].reduce((n, f) => n + f.waiters.length, 0);

  /** Derivations served before one more of `flow` would be: its round-robin position. */
  function aheadOf(flow: Flow | undefined, cls: FlowClass): number {
    const turns = (flow?.waiters.length ?? 0) + 1;
    let mine = 0;
    for (const f of rings[cls]) mine += f === flow ? turns - 1 : Math.min(f.waiters.length, turns);
    const other = queuedInClass(cls === "known" ? "unknown" : "known");
    return mine + Math.min(other, mine + 1);
  }

  function take(w: Waiter, flow: Flow, at: number) {
    flow.waiters.splice(at, 1);
    queued--;
    secretChecksQueued.dec({ lane: flow.cls });
    if (flow.waiters.length === 0) {
      flows.delete(flow.id);
      const ring = rings[flow.cls];
      const i = ring.indexOf(flow);
      if (i >= 0) ring.splice(i, 1);
    }
    return w;
  }

  function pick(): Waiter | undefined {
    const order: FlowClass[] = lastClass === "known" ? ["unknown", "known"] : ["known", "unknown"];
    for (const cls of order) {
      const flow = rings[cls].shift();
      if (!flow) continue;
      lastClass = cls;
      rings[cls].push(flow);
      return take(flow.waiters[0]!, flow, 0);
    }
    return undefined;
  }

  function next() {
    for (;;) {
      const w = pick();
      if (!w) {
        secretChecksActive.dec();
        return void active--;
      }
      if (performance.now() - w.enqueuedAt > o.maxWaitMs) {
        w.shed();
        continue;
      }
      return w.start();
    }
  }

  /** Makes room for one more waiter of `mine` when the queue is full: sheds the newest waiter of the longest other flow. */
  function evictForFull(mine: Flow | undefined): boolean {
    let longest: Flow | undefined;
    for (const f of flows.values()) if (!longest || f.waiters.length > longest.waiters.length) longest = f;
    if (!longest || longest === mine || longest.waiters.length <= (mine?.waiters.length ?? 0) + 1) return false;
    take(longest.waiters[longest.waiters.length - 1]!, longest, longest.waiters.length - 1).shed();
    return true;
  }

  /** The expected wait when one more derivation of this flow would be refused now (nothing changes); undefined when it would be admitted. */
  function refusal(cls: FlowClass, flow: Flow | undefined): number | undefined {
    const expected = drainEstimate(aheadOf(flow, cls));
    if ((flow?.waiters.length ?? 0) >= o.maxPerFlow || expected > o.maxWaitMs) return expected;
    if (queued < o.maxQueue) return undefined;
    let longest: Flow | undefined;
    for (const f of flows.values()) if (!longest || f.waiters.length > longest.waiters.length) longest = f;
    return !longest || longest === flow || longest.waiters.length <= (flow?.waiters.length ?? 0) + 1 ? expected : undefined;
  }

  return {
    load: () => ({ active, queued, known: queuedInClass("known"), unknown: queuedInClass("unknown"), flows: flows.size }),
    /** Refuses (OVERLOADED) at once, without queueing, if a derivation of this flow would be refused now. */
    admit(flowOf: SecretFlow): void {
      if (active < o.max) return;
      const cls: FlowClass = flowOf.known ? "known" : "unknown";
      const wait = refusal(cls, flows.get(`${cls}\0${flowOf.key}`));
      if (wait !== undefined) overloaded(wait);
    },
    /** A waiter whose `signal` aborts (its caller's deadline passed, or it left) leaves the queue, never derived. */
    async run<T>(work: () => Promise<T>, flowOf: SecretFlow, signal?: AbortSignal): Promise<T> {
      if (signal?.aborted) leftBefore(signal);
      if (active >= o.max) {
        const cls: FlowClass = flowOf.known ? "known" : "unknown";
        const id = `${cls}\0${flowOf.key}`;
        let flow = flows.get(id);
        if ((flow?.waiters.length ?? 0) >= o.maxPerFlow) overloaded(drainEstimate(aheadOf(flow, cls)));
        const expected = drainEstimate(aheadOf(flow, cls));
        if (expected > o.maxWaitMs) overloaded(expected);
        if (queued >= o.maxQueue && !evictForFull(flow)) overloaded(expected);
        if (!flow) {
          flows.set(id, (flow = { id, cls, waiters: [] }));
          rings[cls].push(flow);
        }
        const f = flow;
        await new Promise<void>((resolve, reject) => {
          queued++;
          secretChecksQueued.inc({ lane: cls });
          const leave = () => {
            const at = f.waiters.indexOf(w);
            if (at >= 0) take(w, f, at);
            secretChecksAbandoned.inc();
            reject(abandoned(signal!, "while waiting for a secret check"));
          };
          const quiet = () => (canAbort(signal) ? signal.removeEventListener("abort", leave) : undefined);
          const w: Waiter = {
            start: () => {
              quiet();
              resolve();
            },
            shed: () => {
              quiet();
              try {
                overloaded(drainEstimate(queued));
              } catch (err) {
                reject(err);
              }
            },
            enqueuedAt: performance.now(),
          };
          if (canAbort(signal)) signal.addEventListener("abort", leave, { once: true });
          f.waiters.push(w);
        });
      } else {
        active++;
        secretChecksActive.inc();
      }
      const started = performance.now();
      secretDerivations.inc();
      try {
        return await work();
      } finally {
        avgMs = avgMs * 0.8 + (performance.now() - started) * 0.2;
        next();
      }
    },
  };
}
