import { Worker } from "node:worker_threads";
import type { ScryptOptions } from "node:crypto";

/**
 * Secret derivations (scrypt) on worker threads that run at the lowest CPU priority.
 *
 * A wrong secret costs a full derivation (tens of milliseconds of CPU), and anyone can
 * send one. On libuv's thread pool those derivations ran at the same priority as the
 * threads that serve requests and as the database, so a burst of wrong secrets took
 * whole cores from legitimate readers. Here each worker lowers its own thread's priority
 * (nice 19; on Linux the nice value belongs to the thread) before taking work, so a
 * derivation only gets the CPU that serving requests leaves: when the machine is busy,
 * derivations wait (and the caller's queue sheds them), readers do not.
 *
 * Workers run plain JavaScript from a string, so the same code works from the compiled
 * build and under tsx. The worker is referenced only while it works, so an idle hasher
 * never keeps a process alive.
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { scryptSync } = require("node:crypto");
let niced = false;
try { require("node:os").setPriority(19); niced = true; } catch {}
parentPort.postMessage({ ready: true, niced });
parentPort.on("message", (m) => {
  try {
    const key = scryptSync(m.secret, m.salt, m.keylen, m.options);
    parentPort.postMessage({ id: m.id, key });
  } catch (err) {
    parentPort.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});
`;

interface Job {
  resolve(key: Buffer): void;
  reject(err: Error): void;
}

interface Slot {
  worker: Worker;
  ready: Promise<boolean>;
  job?: Job;
}

export interface ScryptWorkers {
  /** Derives a key on a free worker; callers never run more derivations than `size` at once. */
  derive(secret: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer>;
  /** Whether every worker started so far lowered its priority (false where the platform refuses). */
  niced(): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * `size` workers at most, each started on first need (a process that never checks a
 * secret, such as most CLI commands, starts none). `onPriorityRefused` is called once if
 * a worker could not lower its priority.
 */
export function createScryptWorkers(size: number, onPriorityRefused?: () => void): ScryptWorkers {
  let nextId = 0;
  let warned = false;
  const free: Slot[] = [];
  const all: Slot[] = [];

  function start(): Slot {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    let readyResolve!: (niced: boolean) => void;
    const slot: Slot = { worker, ready: new Promise((resolve) => (readyResolve = resolve)) };
    worker.on("message", (m: { ready?: boolean; niced?: boolean; id?: number; key?: Uint8Array; error?: string }) => {
      if (m.ready) {
        if (m.niced !== true && !warned && onPriorityRefused) {
          warned = true;
          onPriorityRefused();
        }
        return readyResolve(m.niced === true);
      }
      const job = slot.job;
      slot.job = undefined;
      worker.unref();
      free.push(slot);
      if (!job) return;
      if (m.error !== undefined || !m.key) job.reject(new Error(`scrypt failed: ${m.error ?? "no key"}`));
      else job.resolve(Buffer.from(m.key.buffer, m.key.byteOffset, m.key.byteLength));
    });
    worker.on("error", (err) => {
      // A worker that died takes its job with it; the next derivation starts a fresh one.
      slot.job?.reject(err);
      slot.job = undefined;
      readyResolve(false);
      const i = all.indexOf(slot);
      if (i >= 0) all.splice(i, 1);
      const f = free.indexOf(slot);
      if (f >= 0) free.splice(f, 1);
    });
    all.push(slot);
    return slot;
  }

  return {
    derive(secret, salt, keylen, options) {
      const slot = free.pop() ?? (all.length < size ? start() : undefined);
      if (!slot) return Promise.reject(new Error("scrypt workers: more derivations than workers"));
      return new Promise<Buffer>((resolve, reject) => {
        slot.job = { resolve, reject };
        slot.worker.ref();
        slot.worker.postMessage({ id: nextId++, secret, salt, keylen, options });
      });
    },
    async niced() {
      return (await Promise.all(all.map((s) => s.ready))).every(Boolean);
    },
    async close() {
      await Promise.all(all.splice(0).map((s) => s.worker.terminate()));
      free.length = 0;
    },
  };
}
