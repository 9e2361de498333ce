import { createPublicKey, type KeyObject } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { Logger } from "pino";
import { keyPublished, keyVerifiesTokenIssuedAt, type KeyState } from "./lifecycle.js";
import type { KeysStore } from "./store.js";

/** How long a snapshot of key states is trusted before it is read again (cross-replica delay). */
export const KEY_STATE_TTL_MS = 1000;
/** An unknown kid (another replica may just have rotated it in) rereads sooner, but never more often: it waits. */
const UNKNOWN_KID_RELOAD_MS = 100;

interface Entry {
  state: KeyState;
  /** Undefined when the published JWK is malformed: it verifies nothing, the others still work. */
  key: KeyObject | undefined;
}

export interface VerificationKeys {
  /**
   * The public key allowed to verify a token with this `kid` and `iat` (epoch seconds)
   * right now, or undefined (unknown, retired, rotated before `iat`, or rotated out).
   * Reads the database at most about once a second; otherwise a map lookup.
   */
  keyFor(kid: string, iat: number): Promise<KeyObject | undefined>;
  /** The public keys that belong in the JWKS now, newest first. */
  published(): Promise<KeyState[]>;
  /** Rereads the states when the snapshot is older than the TTL (callers share one read). */
  refreshIfStale(): Promise<void>;
  /** True when the last snapshot held at least one live key. */
  anyLive(): boolean;
  /** Forget the snapshot: this process just changed key states, the next call rereads. */
  invalidate(): void;
}

/**
 * Per-process cache of signing_keys states. Key material never changes for a kid, so
 * KeyObjects are reused across reloads; only the states (rotated, retired) are reread.
 */
export function createVerificationKeys(options: {
  store: KeysStore;
  clock: () => Date;
  logger: Logger;
  ttlMs?: number;
  unknownKidRereadMs?: number;
  /** Sees every snapshot read (the keyring checks its own key's state there). */
  onRead?: (states: KeyState[]) => Promise<void>;
}): VerificationKeys {
  const ttl = options.ttlMs ?? KEY_STATE_TTL_MS;
  const unknownKidEvery = options.unknownKidRereadMs ?? UNKNOWN_KID_RELOAD_MS;
  let entries = new Map<string, Entry>();
  let loaded = false;
  let loadedAt = -Infinity;
  let generation = 0;
  let loading: { generation: number; done: Promise<void> } | undefined;

  async function load(startedAt: number): Promise<void> {
    try {
      const states = await options.store.listLive(options.clock());
      const next = new Map<string, Entry>();
      for (const state of states) {
        const previous = entries.get(state.kid);
        next.set(state.kid, { state, key: previous?.key ?? toKeyObject(state) });
      }
      entries = next;
      loaded = true;
      await options.onRead?.(states);
      // A change made by this process while the read was in flight leaves the snapshot stale.
      loadedAt = startedAt === generation ? performance.now() : -Infinity;
    } catch (err) {
      // Keep the previous snapshot for one more period rather than failing every token.
      if (!loaded) throw err;
      options.logger.warn({ err }, "signing key states could not be reread; using the previous ones");
      loadedAt = performance.now();
    }
  }

  /** One read at a time; callers share it unless it began before the last invalidate(), or `anew` wants one of its own. */
  function reload(anew = false): Promise<void> {
    if (!anew && loading && loading.generation === generation) return loading.done;
    const startedAt = generation;
    const prior = loading ? loading.done.catch(() => undefined) : Promise.resolve();
    const done: Promise<void> = prior
      .then(() => load(startedAt))
      .finally(() => {
        if (loading?.done === done) loading = undefined;
      });
    loading = { generation: startedAt, done };
    return done;
  }

  let unknownKidRead: { begun: boolean; done: Promise<void> } | undefined;
  /**
   * A read begun after the call, for a kid the snapshot lacks (another replica's new key): callers share
   * one until it begins, and such reads begin at most once per `unknownKidEvery`, the others waiting.
   */
  function rereadForUnknownKid(): Promise<void> {
    if (unknownKidRead && !unknownKidRead.begun) return unknownKidRead.done;
    const prior = unknownKidRead ? unknownKidRead.done.catch(() => undefined) : Promise.resolve();
    const read = { begun: false, done: Promise.resolve() };
    read.done = prior
      .then(async () => {
        const wait = unknownKidEvery - (performance.now() - loadedAt);
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        read.begun = true;
        await reload(true);
      })
      .finally(() => {
        if (unknownKidRead === read) unknownKidRead = undefined;
      });
    unknownKidRead = read;
    return read.done;
  }

  async function fresh(): Promise<void> {
    if (performance.now() - loadedAt > ttl) await reload();
  }

  return {
    async keyFor(kid, iat) {
      await fresh();
      let entry = entries.get(kid);
      if (!entry) {
        await rereadForUnknownKid();
        entry = entries.get(kid);
      }
      if (!entry?.key || !keyVerifiesTokenIssuedAt(entry.state, iat, options.clock())) return undefined;
      return entry.key;
    },
    async published() {
      await fresh();
      const now = options.clock();
      return [...entries.values()].filter((e) => keyPublished(e.state, now)).map((e) => e.state);
    },
    refreshIfStale: fresh,
    anyLive() {
      const now = options.clock();
      for (const e of entries.values()) if (e.key && keyPublished(e.state, now)) return true;
      return false;
    },
    invalidate() {
      generation++;
      loadedAt = -Infinity;
    },
  };
}

function toKeyObject(state: KeyState): KeyObject | undefined {
  const { kty, crv, x, y } = state.jwk;
  if (kty !== "EC" || crv !== "P-256" || typeof x !== "string" || typeof y !== "string") return undefined;
  try {
    return createPublicKey({ key: { kty, crv, x, y }, format: "jwk" });
  } catch {
    return undefined;
  }
}
