import { Worker } from "node:worker_threads";
import type { ScryptOptions } from "node:crypto";

/**
 * scrypt on worker threads at the lowest CPU priority (nice 19, and SCHED_IDLE via `chrt`
 * where allowed): anyone can send a wrong secret, and derivations must only get CPU that
 * serving requests leaves (docs/reference/partner-token.md). Plain JS source runs built or under tsx.
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { scryptSync } = require("node:crypto");
let niced = false;
try { require("node:os").setPriority(19); niced = true; } catch {}
let idle = false;
try {
  // This thread's id (Linux), then chrt from its fixed install paths (never from PATH).
  const fs = require("node:fs");
  const tid = fs.readlinkSync("/proc/thread-self").split("/").pop();
  const chrt = ["/usr/bin/chrt", "/bin/chrt"].find((path) => fs.existsSync(path));
  if (/^[0-9]+$/.test(tid) && chrt) {
    require("node:child_process").execFileSync(chrt, ["--idle", "--pid", "0", tid], { stdio: "ignore", timeout: 5000, env: {} });
    idle = true;
  }
} catch {}
parentPort.postMessage({ ready: true, niced, idle });
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

/** How far the derivation threads lowered their priority. */
export interface HasherPriority {
  /** Nice 19 (false where the platform refuses). */
  niced: boolean;
  /** The SCHED_IDLE policy (false off Linux, or without util-linux's chrt). */
  idle: boolean;
}

interface Slot {
  worker: Worker;
  ready: Promise<HasherPriority>;
  job?: Job;
}

export interface ScryptWorkers {
  /** Derives a key on a free worker; callers never run more derivations than `size` at once. */
  derive(secret: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer>;
  /** What every worker started so far achieved (each field true only if true for all). */
  priority(): Promise<HasherPriority>;
  close(): Promise<void>;
}

/**
 * `size` workers at most, each started on first need (a process that never checks a
 * secret, such as most CLI commands, starts none). `onPriorityShortfall` is called once,
 * with what it achieved, for the first worker that could not take both steps.
 */
export function createScryptWorkers(size: number, onPriorityShortfall?: (priority: HasherPriority) => void): ScryptWorkers {
  let nextId = 0;
  let warned = false;
  const free: Slot[] = [];
  const all: Slot[] = [];

  function start(): Slot {
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    let readyResolve!: (priority: HasherPriority) => void;
    const slot: Slot = { worker, ready: new Promise((resolve) => (readyResolve = resolve)) };
    worker.on("message", (m: { ready?: boolean; niced?: boolean; idle?: boolean; id?: number; key?: Uint8Array; error?: string }) => {
      if (m.ready) {
        const priority = { niced: m.niced === true, idle: m.idle === true };
        if ((!priority.niced || !priority.idle) && !warned && onPriorityShortfall) {
          warned = true;
          onPriorityShortfall(priority);
        }
        return readyResolve(priority);
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
      readyResolve({ niced: false, idle: false });
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
    async priority() {
      const each = await Promise.all(all.map((s) => s.ready));
      return { niced: each.every((p) => p.niced), idle: each.every((p) => p.idle) };
    },
    async close() {
      await Promise.all(all.splice(0).map((s) => s.worker.terminate()));
      free.length = 0;
    },
  };
}
