import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import { createAttemptSpill } from "./attempt-spill.js";
import { createExpiringMap } from "./expiring-map.js";
import type { SecretFlow, SecretHasher } from "./hasher.js";
import { createTimingMirror } from "./timing-mirror.js";
import { hmacSha256 } from "../../lib/crypto.js";
import { abandoned, canAbort } from "../deadlines.js";
import { leftBefore } from "./fair-gate.js";

/**
 * Per-client-id counting before any derivation. `failures` reserves a slot before the check, so a
 * concurrent burst cannot overshoot, and gives it back when the secret is right or the check was shed.
 */
export interface ClientBudget {
  key: string;
  limit: number;
  counts: "attempts" | "failures";
}

export interface ClientSecretCheckerOptions {
  hasher: SecretHasher;
  rateLimits: RateLimitStore;
  clock: () => Date;
  logger: Logger;
  budget: ClientBudget;
  /** Unregistered client ids whose attempts are kept one by one (default 100,000). */
  unknownClientIds?: number;
}

export type SecretCheck =
  /** `hash` is the stored hash the secret verified against; `upgrade`, when set, replaces it at the current parameters. */
  { ok: true; hash: string; upgrade?: string } | { ok: false };

/** How long a verified secret is remembered (a hit skips the derivation, nothing else). */
const VERIFIED_TTL_MS = 15 * 60_000;
const MEMORY_ENTRIES = 10_000;
/** More unknown ids than the derivation gate can check in a minute, so a prober cannot evict one mid-window. */
const UNKNOWN_ENTRIES = 100_000;

/**
 * The client-secret check both token endpoints share. Nobody is refused for what others did: the
 * budget belongs to the presented client id, and a flood gets only its fair share of derivations.
 */
export function createClientSecretChecker(o: ClientSecretCheckerOptions) {
  // Verified secrets: HMAC(process-random key, client_id, secret) -> the stored hash the
  // secret verified against. The key proves nothing without the secret and dies with the
  // process; callers honour a hit only if that hash is still the client's current one.
  const cacheKey = randomBytes(32);
  const verified = createExpiringMap<string>(MEMORY_ENTRIES);
  const keyOf = (clientId: string, secret: string) => hmacSha256(cacheKey, `${clientId}\0${secret}`, "base64url");

  // How long counting takes: an unknown client id's check waits as long instead.
  const counting = createTimingMirror();
  // An unknown client id's attempts, counted in memory only: it answers 429 where a
  // registered one would, so the limit tells a prober nothing about which ids exist.
  // Memory stays bounded: past the cap, the oldest id's live attempts move to the spill.
  const unknownIds = o.unknownClientIds ?? UNKNOWN_ENTRIES;
  const spill = createAttemptSpill(Math.max(4096, unknownIds));
  const unknownAttempts = createExpiringMap<number[]>(unknownIds, (key, hits, until) => spill.add(key, hits.length, until, o.clock().getTime()));
  function countUnknown(clientId: string, now: Date): void {
    const at = now.getTime();
    const hits = (unknownAttempts.get(o.budget.key + clientId, at) ?? []).filter((t) => t > at - 60_000);
    const spilled = spill.count(o.budget.key + clientId, at);
    if (hits.length + spilled >= o.budget.limit) fail(Reason.RATE_LIMITED, "too many client authentication attempts", { retryAfterSeconds: 60 });
    hits.push(at);
    unknownAttempts.set(o.budget.key + clientId, hits, at + 60_000);
  }
  function releaseUnknown(clientId: string, now: Date): void {
    const hits = unknownAttempts.get(o.budget.key + clientId, now.getTime());
    const i = hits?.lastIndexOf(now.getTime()) ?? -1;
    if (i >= 0) hits!.splice(i, 1);
  }
  async function count(clientId: string, now: Date): Promise<void> {
    const limit = await counting.time(() => o.rateLimits.hit(o.budget.key + clientId, o.budget.limit, 60, now));
    if (!limit.allowed) fail(Reason.RATE_LIMITED, "too many client authentication attempts", { retryAfterSeconds: 60 });
  }

  async function release(clientId: string, at: Date): Promise<void> {
    await o.rateLimits.release(o.budget.key + clientId, at).catch((err: unknown) => {
      o.logger.warn({ err: String(err) }, "could not release a client-secret attempt slot");
    });
  }

  // Checks of the same secret against the same hash that arrive together share one
  // derivation (and one rehash): a client's burst of first requests costs one, not one each.
  // It waits for its slot while one of its callers still does; each caller may leave before.
  const inFlight = new Map<string, Shared>();
  function verifyOnce(clientId: string, secret: string, stored: string | undefined, flow: SecretFlow, signal: AbortSignal | undefined) {
    if (signal?.aborted) leftBefore(signal);
    const key = `${keyOf(clientId, secret)}\0${stored ?? ""}`;
    let shared = inFlight.get(key);
    // One all its callers left may still be settling: a newcomer starts its own.
    if (!shared || shared.left.signal.aborted) {
      const s: Shared = { waiting: 0, pinned: false, left: new AbortController(), result: Promise.resolve({ ok: false }) };
      s.result = (async () => {
        const ok = await o.hasher.verify(secret, stored ?? o.hasher.dummyHash, flow, s.left.signal);
        if (!ok || stored === undefined || !o.hasher.needsRehash(stored)) return { ok };
        // A shed rehash waits for the next success.
        return { ok, upgrade: await o.hasher.hash(secret, flow, s.left.signal).catch(() => undefined) };
      })().finally(() => inFlight.get(key) === s && inFlight.delete(key));
      inFlight.set(key, s);
      shared = s;
    }
    return joinCheck(shared, signal);
  }

  const flowOf = (clientId: string, stored: string | undefined, address: string): SecretFlow =>
    stored !== undefined ? { known: true, key: clientId } : { known: false, key: address };

  const remember = (clientId: string, secret: string, hash: string) => verified.set(keyOf(clientId, secret), hash, o.clock().getTime() + VERIFIED_TTL_MS);

  return {
    /** The stored hash this secret verified against lately, if any. */
    remembered(clientId: string, secret: string): string | undefined {
      return verified.get(keyOf(clientId, secret), o.clock().getTime());
    },
    remember,
    forget(clientId: string, secret: string): void {
      verified.delete(keyOf(clientId, secret));
    },
    /**
     * Refuses (OVERLOADED) before any database work when this check's share of the
     * derivations is full: a flood's excess costs memory only, not a counted attempt.
     */
    admit(clientId: string, stored: string | undefined, address: string): void {
      o.hasher.admit(flowOf(clientId, stored, address));
    },
    /** Counts one attempt against the client's budget (RATE_LIMITED when over it). */
    count: (clientId: string) => count(clientId, o.clock()),

    /**
     * Counts, then derives. An unknown client (`stored` undefined) is counted in memory after the same
     * wait a database count takes, and its checks share one flow per vouched `address`.
     */
    async check(clientId: string, secret: string, stored: string | undefined, address: string, signal?: AbortSignal): Promise<SecretCheck> {
      const now = o.clock();
      const flow = flowOf(clientId, stored, address);
      o.hasher.admit(flow);
      if (stored === undefined) {
        await counting.wait();
        countUnknown(clientId, now);
      } else await count(clientId, now);
      let verified: { ok: boolean; upgrade?: string };
      try {
        verified = await verifyOnce(clientId, secret, stored, flow, signal);
      } catch (err) {
        // Shed, or its caller left: nothing was decided, so it is not a failure.
        if (o.budget.counts === "failures") {
          if (stored === undefined) releaseUnknown(clientId, now);
          else await release(clientId, now);
        }
        throw err;
      }
      if (stored === undefined || !verified.ok) return { ok: false };
      if (o.budget.counts === "failures") await release(clientId, now);
      // A hash about to be replaced is remembered by the caller once the replacement is stored.
      if (!verified.upgrade) remember(clientId, secret, stored);
      return { ok: true, hash: stored, upgrade: verified.upgrade };
    },
  };
}

export type ClientSecretChecker = ReturnType<typeof createClientSecretChecker>;

/** One derivation shared by the checks that arrived together; `left` aborts when every caller has gone. */
interface Shared {
  result: Promise<{ ok: boolean; upgrade?: string }>;
  waiting: number;
  /** A caller that cannot leave (no signal) joined: the derivation is needed whatever the others do. */
  pinned: boolean;
  left: AbortController;
}

/** The shared check's result for one caller, or DeadlineExceeded (Canceled) as soon as its own signal aborts. */
function joinCheck(shared: Shared, signal: AbortSignal | undefined): Promise<{ ok: boolean; upgrade?: string }> {
  if (!canAbort(signal)) {
    shared.pinned = true;
    return shared.result;
  }
  shared.waiting++;
  return new Promise((resolve, reject) => {
    const leave = () => {
      if (--shared.waiting === 0 && !shared.pinned) shared.left.abort(signal.reason);
      reject(abandoned(signal, "while waiting for a secret check"));
    };
    signal.addEventListener("abort", leave, { once: true });
    shared.result.then(
      (v) => {
        signal.removeEventListener("abort", leave);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", leave);
        reject(err);
      },
    );
  });
}
