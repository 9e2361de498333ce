import { randomBytes, type ScryptOptions } from "node:crypto";
import { createScryptWorkers, type HasherPriority } from "./scrypt-workers.js";
import { createFairGate, type SecretFlow } from "./fair-gate.js";
import { constantTimeEqualBytes } from "../../lib/crypto.js";

export type { SecretFlow } from "./fair-gate.js";

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

/**
 * Client secrets are 256 random bits: guessing one is hopeless at any cost per guess, so
 * scrypt's work factor buys nothing and only makes every wrong secret dearer for us; a
 * small salted, memory-hard hash still leaves a dump nothing usable.
 */
export const CLIENT_SECRET_SCRYPT: ScryptParams = { N: 2 ** 10, r: 8, p: 1 };

export interface SecretHasherOptions {
  params?: ScryptParams;
  /** At most this many derivations at once; the rest wait their flow's turn. */
  maxConcurrent?: number;
  /** At most this many waiting derivations in all; one more sheds from the longest flow (OVERLOADED). */
  maxQueue?: number;
  /** At most this many waiting derivations of one flow; one more of it is shed (OVERLOADED). */
  maxPerFlow?: number;
  /** A derivation expected to wait longer than this, or that did, is shed (OVERLOADED). */
  maxWaitMs?: number;
  /** Called once, with what was achieved, if derivations could not be given the lowest CPU priority. */
  onPriorityShortfall?: (priority: HasherPriority) => void;
}

/** Operator hashing (creating a client, rotating a secret): known work, a flow of its own. */
const HASH_FLOW: SecretFlow = { known: true, key: "\0hash" };

/**
 * `signal` is the caller's (ctx.signal): a derivation still waiting for its slot when it aborts is
 * dropped and throws DeadlineExceeded (or Canceled). Shed or dropped, nothing was decided.
 */
export interface SecretHasher {
  /** Throws OVERLOADED (with retryAfterSeconds) when the derivation is shed. */
  hash(secret: string, flow?: SecretFlow, signal?: AbortSignal): Promise<string>;
  /** Throws OVERLOADED (with retryAfterSeconds) when the check is shed: nothing was decided. */
  verify(secret: string, stored: string, flow?: SecretFlow, signal?: AbortSignal): Promise<boolean>;
  /** Throws OVERLOADED at once when a derivation of this flow would be shed now: callers refuse before any other work. */
  admit(flow: SecretFlow): void;
  /** True when `stored` was made with other parameters than the current ones (rehash it after a success). */
  needsRehash(stored: string): boolean;
  /** A hash of a random secret at the current parameters: unknown clients are verified against it. */
  readonly dummyHash: string;
  /** Derivations running and waiting now (operators' and tests' view of the queue). */
  load(): { active: number; queued: number; known: number; unknown: number; flows: number };
  /** How far the derivation threads started so far lowered their CPU priority. */
  priority(): Promise<HasherPriority>;
  /** Stops the derivation threads. */
  close(): Promise<void>;
}

const KEYLEN = 32;

function parse(stored: string): { params: ScryptParams; salt: string; expected: string } | undefined {
  const parts = stored.split("$");
  const [scheme, n, r, p, salt, expected] = parts;
  if (parts.length !== 6 || scheme !== "scrypt" || !salt || !expected) return undefined;
  const params = { N: Number(n), r: Number(r), p: Number(p) };
  if (![params.N, params.r, params.p].every((x) => Number.isSafeInteger(x) && x > 0)) return undefined;
  return { params, salt, expected };
}

/**
 * Salted scrypt, parameters stored beside the hash (`scrypt$N$r$p$salt$hash`) so they can change.
 * Derivations run on low-priority threads behind a fair, shedding gate, so floods cannot starve core.
 */
export async function createSecretHasher(options: SecretHasherOptions = {}): Promise<SecretHasher> {
  const params = options.params ?? CLIENT_SECRET_SCRYPT;
  const max = options.maxConcurrent ?? 2;
  const gate = createFairGate({ max, maxQueue: options.maxQueue ?? 64, maxPerFlow: options.maxPerFlow ?? 8, maxWaitMs: options.maxWaitMs ?? 1000 });
  const workers = createScryptWorkers(max, options.onPriorityShortfall);

  const derive = (secret: string, salt: Buffer, p: ScryptParams, flow: SecretFlow, signal: AbortSignal | undefined) =>
    gate.run(
      () => {
        const opts: ScryptOptions = { N: p.N, r: p.r, p: p.p, maxmem: 256 * p.N * p.r + 1024 * 1024 };
        return workers.derive(secret, salt, KEYLEN, opts);
      },
      flow,
      signal,
    );

  const hash = async (secret: string, flow: SecretFlow = HASH_FLOW, signal?: AbortSignal) => {
    const salt = randomBytes(16);
    const key = await derive(secret, salt, params, flow, signal);
    return `scrypt$${params.N}$${params.r}$${params.p}$${salt.toString("base64url")}$${key.toString("base64url")}`;
  };

  // Checked against for unknown clients: the same parameters as a real hash, so the check
  // costs the same derivation, and a random key that no secret derives (nothing is
  // derived to make it, which keeps start-up, CLI commands included, free of a derivation).
  const dummyHash = `scrypt$${params.N}$${params.r}$${params.p}$${randomBytes(16).toString("base64url")}$${randomBytes(KEYLEN).toString("base64url")}`;

  return {
    hash,
    dummyHash,
    load: () => gate.load(),
    admit: (flow) => gate.admit(flow),
    priority: () => workers.priority(),
    close: () => workers.close(),
    needsRehash(stored) {
      const parsed = parse(stored);
      return !!parsed && (parsed.params.N !== params.N || parsed.params.r !== params.r || parsed.params.p !== params.p);
    },
    async verify(secret, stored, flow = HASH_FLOW, signal) {
      const parsed = parse(stored);
      if (!parsed) return false;
      const key = await derive(secret, Buffer.from(parsed.salt, "base64url"), parsed.params, flow, signal);
      const want = Buffer.from(parsed.expected, "base64url");
      return constantTimeEqualBytes(key, want);
    },
  };
}
