import * as nodeCrypto from "node:crypto";
import { randomBytes, timingSafeEqual, createHash, type ScryptOptions } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { secretChecksActive, secretChecksQueued, secretChecksShed } from "../observability/metrics.js";
import { createScryptWorkers, type HasherPriority } from "./scrypt-workers.js";

/** spec 2.5: `gpc_<slug>_<8 hex chars>`. */
export function generateClientId(slug: string): string {
  return `gpc_${slug}_${randomBytes(4).toString("hex")}`;
}

/** spec 2.5: `gps_` followed by 32 random bytes in base64url. */
export function generateClientSecret(): string {
  return `gps_${randomBytes(32).toString("base64url")}`;
}

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

/** A URL-safe slug: lower-case letters, digits and inner '-', 1-32 characters. */
export function isValidSlug(slug: string): boolean {
  return SLUG.test(slug);
}

/** Derives a slug from a display name, or undefined when nothing usable remains. */
export function slugFromName(name: string): string | undefined {
  const slug = name
    .normalize("NFKD")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 32)
    .replace(/-+$/, "");
  return slug && isValidSlug(slug) ? slug : undefined;
}

/** Constant-time equality for secrets, hashes and CSRF tokens of any length. */
export function constantTimeEqual(a: string, b: string): boolean {
  // Hash first so unequal lengths cost the same and leak nothing.
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

export interface SecretHasherOptions {
  params?: ScryptParams;
  /** At most this many derivations at once; the rest queue (DESIGN 7: keep the thread pool free). */
  maxConcurrent?: number;
  /** At most this many waiting derivations per lane; one more is shed at once (OVERLOADED). */
  maxQueue?: number;
  /** A derivation expected to wait longer than this, or that did, is shed (OVERLOADED). */
  maxWaitMs?: number;
  /** Called once, with what was achieved, if derivations could not be given the lowest CPU priority. */
  onPriorityShortfall?: (priority: HasherPriority) => void;
}

/**
 * Which queue a derivation waits in. `priority` is served before `normal` whenever a
 * slot frees: admin hashing and clients with a recent successful check, so a flood of
 * anonymous failures (always `normal`) never stands in front of them.
 */
export type SecretLane = "normal" | "priority";

export interface SecretHasher {
  /** Throws OVERLOADED (with retryAfterSeconds) when the derivation is shed. */
  hash(secret: string, lane?: SecretLane): Promise<string>;
  /** Throws OVERLOADED (with retryAfterSeconds) when the check is shed: nothing was decided. */
  verify(secret: string, stored: string, lane?: SecretLane): Promise<boolean>;
  /** A hash of a random secret: unknown clients are verified against it (spec 5.2). */
  readonly dummyHash: string;
  /** Derivations running and waiting now (operators' and tests' view of the queue). */
  load(): { active: number; queued: number; priorityQueued: number };
  /** How far the derivation threads started so far lowered their CPU priority. */
  priority(): Promise<HasherPriority>;
  /** Stops the derivation threads. */
  close(): Promise<void>;
}

const KEYLEN = 32;

/**
 * Salted scrypt with its parameters stored beside the hash: `scrypt$N$r$p$salt$hash`.
 * Derivations run on their own low-priority threads (scrypt-workers.ts), at most
 * `maxConcurrent` at once, behind a gate that queues and sheds.
 */
export async function createSecretHasher(options: SecretHasherOptions = {}): Promise<SecretHasher> {
  const params = options.params ?? { N: 2 ** 14, r: 8, p: 1 };
  const max = options.maxConcurrent ?? 2;
  const gate = createGate({ max, maxQueue: options.maxQueue ?? 16, maxWaitMs: options.maxWaitMs ?? 1000 });
  const workers = createScryptWorkers(max, options.onPriorityShortfall);

  const derive = (secret: string, salt: Buffer, p: ScryptParams, lane: SecretLane) =>
    gate.run(() => {
      const opts: ScryptOptions = { N: p.N, r: p.r, p: p.p, maxmem: 256 * p.N * p.r + 1024 * 1024 };
      return workers.derive(secret, salt, KEYLEN, opts);
    }, lane);

  const hash = async (secret: string, lane: SecretLane = "normal") => {
    const salt = randomBytes(16);
    const key = await derive(secret, salt, params, lane);
    return `scrypt$${params.N}$${params.r}$${params.p}$${salt.toString("base64url")}$${key.toString("base64url")}`;
  };

  // Checked against for unknown clients: the same parameters as a real hash, so the check
  // costs the same derivation, and a random key that no secret derives (nothing is
  // derived to make it, which kept every start-up, CLI commands included, 50 ms longer).
  const dummyHash = `scrypt$${params.N}$${params.r}$${params.p}$${randomBytes(16).toString("base64url")}$${randomBytes(KEYLEN).toString("base64url")}`;

  return {
    hash,
    dummyHash,
    load: () => gate.load(),
    priority: () => workers.priority(),
    close: () => workers.close(),
    async verify(secret, stored, lane = "normal") {
      const parts = stored.split("$");
      const [scheme, n, r, p, salt, expected] = parts;
      if (parts.length !== 6 || scheme !== "scrypt" || !salt || !expected) return false;
      const key = await derive(secret, Buffer.from(salt, "base64url"), { N: Number(n), r: Number(r), p: Number(p) }, lane);
      const want = Buffer.from(expected, "base64url");
      return want.length === key.length && timingSafeEqual(key, want);
    },
  };
}

interface Waiter {
  lane: SecretLane;
  start: () => void;
  shed: () => void;
  enqueuedAt: number;
}

/**
 * A counting semaphore with two bounded FIFO lanes and load shedding. A caller is refused
 * at once (OVERLOADED) when its lane is full or when the expected wait (work ahead of it
 * over the slots, at the observed cost of one derivation) exceeds maxWaitMs; one that
 * still waited longer than maxWaitMs is refused when its turn comes, without running.
 */
function createGate(o: { max: number; maxQueue: number; maxWaitMs: number }) {
  let active = 0;
  const lanes: Record<SecretLane, Waiter[]> = { priority: [], normal: [] };
  // Moving average of one derivation's wall time, seeded pessimistically (first calls).
  let avgMs = 100;

  const overloaded = (waitMs: number): never => {
    secretChecksShed.inc();
    return fail(Reason.OVERLOADED, "too many credential checks in progress; retry shortly", {
      retryAfterSeconds: Math.min(30, Math.max(1, Math.ceil(waitMs / 1000))),
    });
  };

  const drainEstimate = (ahead: number) => ((ahead + 1) / o.max) * avgMs;

  function next() {
    for (;;) {
      const w = lanes.priority.shift() ?? lanes.normal.shift();
      if (!w) {
        secretChecksActive.dec();
        return void active--;
      }
      secretChecksQueued.dec({ lane: w.lane });
      if (performance.now() - w.enqueuedAt > o.maxWaitMs) {
        w.shed();
        continue;
      }
      return w.start();
    }
  }

  return {
    load: () => ({ active, queued: lanes.normal.length, priorityQueued: lanes.priority.length }),
    async run<T>(work: () => Promise<T>, lane: SecretLane): Promise<T> {
      if (active >= o.max) {
        const queue = lanes[lane];
        const ahead = lane === "priority" ? queue.length : lanes.priority.length + queue.length;
        const expected = drainEstimate(ahead);
        if (queue.length >= o.maxQueue || expected > o.maxWaitMs) overloaded(expected);
        await new Promise<void>((resolve, reject) => {
          secretChecksQueued.inc({ lane });
          queue.push({
            lane,
            start: resolve,
            shed: () => {
              try {
                overloaded(drainEstimate(lanes.priority.length + lanes.normal.length));
              } catch (err) {
                reject(err);
              }
            },
            enqueuedAt: performance.now(),
          });
        });
      } else {
        active++;
        secretChecksActive.inc();
      }
      const started = performance.now();
      try {
        return await work();
      } finally {
        avgMs = avgMs * 0.8 + (performance.now() - started) * 0.2;
        next();
      }
    },
  };
}

/**
 * One-shot SHA-256 (`crypto.hash`, Node 20.12 and later): about 0.27 us against 0.7 us
 * for a Hash object, on every token, code and client secret a request presents. Older
 * Node 20 releases get the Hash object.
 */
const oneShotHash = (nodeCrypto as { hash?: (algorithm: string, data: string, encoding: "hex" | "base64url") => string }).hash;
const sha256 = oneShotHash
  ? (value: string, encoding: "hex" | "base64url") => oneShotHash("sha256", value, encoding)
  : (value: string, encoding: "hex" | "base64url") => createHash("sha256").update(value).digest(encoding);

/** SHA-256 for tokens and codes at rest (they are high-entropy; no salt needed). */
export function sha256Hex(value: string): string {
  return sha256(value, "hex");
}

/** SHA-256 as base64url without padding: a PKCE S256 code challenge (RFC 7636). */
export function sha256Base64url(value: string): string {
  return sha256(value, "base64url");
}
