import { createPrivateKey, createPublicKey, sign, type KeyObject } from "node:crypto";
import { mkdir, readFile, writeFile, rename } from "node:fs/promises";
import { join } from "node:path";
import { newP256PrivateKey } from "../../lib/crypto.js";
import { calculateJwkThumbprint, type JWK } from "jose";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { Db } from "../db/knex.js";
import { createKeysStore } from "./store.js";
import { createVerificationKeys } from "./verification-keys.js";
import type { KeyState } from "./lifecycle.js";

export interface KeyringOptions {
  /** SIGNING_KEY: an ES256 private JWK (JSON) or PKCS#8 PEM. Wins over dataDir. */
  signingKey?: string;
  /** Where the generated dev key lives when signingKey is not set; absent = in memory. */
  dataDir?: string;
  db: Db;
  logger: Logger;
  clock: () => Date;
  /** How long key states (rotated, retired) are cached before being reread; default 1 s. */
  keyStateTtlMs?: number;
  /** The least time between rereads for tokens naming a kid the cache lacks; default 100 ms. */
  unknownKidRereadMs?: number;
}

export interface SigningKey {
  kid: string;
  privateKey: KeyObject;
  publicJwk: JWK;
}

/** Writes the audit row of a key change inside the transaction that makes the change. */
export type KeyChangeRecorder = (trx: Knex.Transaction, change: { kid: string; previousKid?: string }) => Promise<unknown>;

export interface Keyring {
  /** The current signing key, or undefined when key configuration is missing or malformed. */
  current(): SigningKey | undefined;
  /** Why current() is undefined, for logs and readiness (never the key itself). */
  problem(): string | undefined;
  /** problem() when the configured key is missing or malformed; not when another replica withdrew it (then only signing stops). */
  configurationProblem(): string | undefined;
  /**
   * The check before every signature and for readiness: rereads key states once they are older than
   * keyStateTtlMs, dropping a key another replica rotated or retired; true when this process can sign.
   * Await it before any transaction opens: a reread needs a pool connection of its own.
   */
  readyToSign(): Promise<boolean>;
  /**
   * readyToSign() without the answer, for an issuer that decides with current() under its own row
   * lock: rereads key states when due (dropping a withdrawn key). Await it before any transaction.
   */
  refreshIfStale(): Promise<void>;
  /** The published public keys: neither retired nor rotated out (lifecycle.ts). */
  jwks(): Promise<{ keys: JWK[] }>;
  /**
   * The public key that may verify a token with this kid and iat now (lifecycle.ts), or
   * undefined. Both token verifiers ask this on every token; the answer comes from a
   * per-process snapshot reread about once a second.
   */
  verificationKey(kid: string, iat: number): Promise<KeyObject | undefined>;
  /** True when some published key can verify anything (false = a configuration problem). */
  hasVerificationKeys(): boolean;
  /** Replaces the current key; the previous one is marked rotated at this moment. */
  rotate(record?: KeyChangeRecorder): Promise<{ kid: string; previousKid?: string; publishedKids: string[] }>;
  /** Withdraws a key at once: it verifies nothing and leaves the JWKS. Never the current key. */
  retire(kid: string, record?: KeyChangeRecorder): Promise<{ kid: string; publishedKids: string[] }>;
  /**
   * Signs a compact JWS (ES256) with the current key, after readyToSign(). `header` is a constant (its
   * encoding is kept per kid); `alg` and `kid` are set here. Synchronous: signing on
   * libuv's thread pool was measured slower three times.
   */
  signJwt(header: Readonly<Record<string, unknown>>, payload: Record<string, unknown>): string;
  readonly source: "env" | "file" | "memory";
}

const KEY_FILE = "signing-key.json";
/** A kid as the keyring makes them (RFC 7638 thumbprint) or any other sane one. */
const KID_PATTERN = /^[A-Za-z0-9_-]{1,128}$/;

/** Loads or creates the signing key and publishes its public half. Never throws on bad config. */
export async function createKeyring(options: KeyringOptions): Promise<Keyring> {
  const { db } = options;
  const store = createKeysStore(db);
  const keys = createVerificationKeys({
    store,
    clock: options.clock,
    logger: options.logger,
    ttlMs: options.keyStateTtlMs,
    unknownKidRereadMs: options.unknownKidRereadMs,
    onRead: (states) => noticeOwnKeyState(states),
  });
  const source = options.signingKey !== undefined ? "env" : options.dataDir ? "file" : "memory";
  let current: SigningKey | undefined;
  const headerSegments = new WeakMap<Readonly<Record<string, unknown>>, { kid: string; segment: string }>();
  let problem: string | undefined;
  let withdrawn = false;

  try {
    if (source === "env") current = await keyFromConfig(options.signingKey!);
    else if (source === "file") current = await loadOrCreateFileKey(options.dataDir!);
    else current = await toSigningKey(newP256PrivateKey());
  } catch (err) {
    // A malformed key gives 503s, never a crash. The message names
    // the setting, not its value.
    problem = `signing key unusable: ${err instanceof Error ? err.message : "invalid"}`;
    options.logger.error({ source }, problem);
  }
  /** Stops signing with `key` (503s, readiness down) if the database says it is rotated or retired. */
  function dropIfWithdrawn(key: SigningKey, state: KeyState | undefined): void {
    if (!(state?.retiredAt || state?.rotatedAt) || current !== key) return;
    problem = `signing key unusable: key ${key.kid} has been ${state.retiredAt ? "retired" : "rotated out"}; configure a new signing key`;
    options.logger.error({ source, kid: key.kid }, problem);
    current = undefined;
    withdrawn = true;
  }
  /** Reads the current key's state from the database (another replica may have withdrawn it). */
  async function readOwnState(): Promise<void> {
    const key = current;
    if (key) dropIfWithdrawn(key, await store.get(key.kid));
  }
  /** A snapshot lacking the current key may predate its publication: only a direct read decides. */
  async function noticeOwnKeyState(states: KeyState[]): Promise<void> {
    const key = current;
    const state = key && states.find((s) => s.kid === key.kid);
    if (key && state) dropIfWithdrawn(key, state);
    else if (key) await readOwnState();
  }

  if (current) {
    await store.publish(db, current.kid, current.publicJwk, options.clock());
    // A key already rotated or retired would sign tokens no verifier accepts: refuse to
    // sign with it (503s and readiness down) until a new key is configured or rotated in.
    await readOwnState();
  }

  // Rotations and retirements of this process happen one at a time.
  let changing: Promise<unknown> = Promise.resolve();
  function serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = changing.then(fn, fn);
    changing = run.catch(() => undefined);
    return run;
  }
  const publishedKids = async () => (await keys.published()).map((k) => k.kid);
  async function refreshIfStale(): Promise<void> {
    // No read per token: the cached states, reread when due, tell (onRead above). A failed
    // reread keeps the previous states; the first one failing leaves signing as configured.
    await keys.refreshIfStale().catch(() => undefined);
  }

  return {
    source,
    current: () => current,
    problem: () => problem,
    configurationProblem: () => (withdrawn ? undefined : problem),
    async readyToSign() {
      await refreshIfStale();
      return current !== undefined;
    },
    refreshIfStale,
    async jwks() {
      return { keys: (await keys.published()).map((k) => k.jwk) };
    },
    verificationKey: (kid, iat) => keys.keyFor(kid, iat),
    hasVerificationKeys: () => keys.anyLive(),
    rotate(record) {
      return serialized(async () => {
        if (source === "env") {
          throw new KeyringError("the signing key comes from SIGNING_KEY; rotate it there (set the new key, restart, then retire the old kid)", "env");
        }
        const previous = current;
        const next = await toSigningKey(newP256PrivateKey());
        // The file first: if the database change then fails, the file goes back, and a
        // crash in between only leaves the old key unrotated (still valid), never a
        // process signing with a key the database calls rotated.
        if (source === "file") await writeKeyFile(options.dataDir!, next.privateKey);
        try {
          await db.transaction(async (trx) => {
            await store.publish(trx, next.kid, next.publicJwk, options.clock());
            await record?.(trx, { kid: next.kid, previousKid: previous?.kid });
          });
        } catch (err) {
          if (source === "file" && previous) await writeKeyFile(options.dataDir!, previous.privateKey).catch(() => undefined);
          throw err;
        } finally {
          keys.invalidate();
        }
        current = next;
        problem = undefined;
        withdrawn = false;
        // Marked only once nothing signs with it: a token it signed while the new key was
        // being published is then never later than its rotation (its iat would be refused).
        try {
          if (previous) await store.markRotated(db, previous.kid, options.clock());
        } finally {
          keys.invalidate();
        }
        return { kid: next.kid, previousKid: previous?.kid, publishedKids: await publishedKids() };
      });
    },
    retire(kid, record) {
      return serialized(async () => {
        if (!KID_PATTERN.test(kid)) throw new KeyringError("kid is malformed", "invalid");
        if (current?.kid === kid) {
          throw new KeyringError("this key is the current signing key; rotate first, then retire it", "current");
        }
        try {
          await db.transaction(async (trx) => {
            if (!(await store.retire(trx, kid, options.clock()))) throw new KeyringError("no signing key has this kid", "not_found");
            await record?.(trx, { kid });
          });
        } finally {
          keys.invalidate();
        }
        return { kid, publishedKids: await publishedKids() };
      });
    },
    signJwt(header, payload) {
      if (!current) throw new KeyringError(problem ?? "no signing key", "unavailable");
      // The header segment depends only on the (constant, frozen) header and the current
      // kid: encoded once per pair, not per token.
      let encoded = headerSegments.get(header);
      if (encoded?.kid !== current.kid)
        headerSegments.set(header, (encoded = { kid: current.kid, segment: b64json({ ...header, alg: "ES256", kid: current.kid }) }));
      const input = `${encoded.segment}.${b64json(payload)}`;
      const signature = sign("sha256", Buffer.from(input), { key: current.privateKey, dsaEncoding: "ieee-p1363" });
      return `${input}.${signature.toString("base64url")}`;
    },
  };
}

/** A key operation that cannot be done with the current configuration or arguments. */
export class KeyringError extends Error {
  override name = "KeyringError";
  constructor(
    message: string,
    /** env: SIGNING_KEY is configured; current: the key signs now; not_found / invalid: the kid. */
    readonly code: "env" | "current" | "not_found" | "invalid" | "unavailable",
  ) {
    super(message);
  }
}

function b64json(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

async function keyFromConfig(value: string): Promise<SigningKey> {
  const text = value.trim();
  if (text === "") throw new Error("SIGNING_KEY is empty");
  let key: KeyObject;
  if (text.startsWith("{")) {
    let jwk: JWK;
    try {
      jwk = JSON.parse(text) as JWK;
    } catch {
      throw new Error("SIGNING_KEY is not valid JSON");
    }
    if (jwk.kty !== "EC" || jwk.crv !== "P-256" || typeof jwk.d !== "string") {
      throw new Error("SIGNING_KEY must be an EC P-256 private JWK");
    }
    key = createPrivateKey({ key: jwk as import("node:crypto").JsonWebKey, format: "jwk" });
  } else if (text.includes("-----BEGIN")) {
    key = createPrivateKey({ key: text, format: "pem" });
  } else {
    throw new Error("SIGNING_KEY must be a private JWK or a PKCS#8 PEM");
  }
  return toSigningKey(key);
}

async function toSigningKey(privateKey: KeyObject): Promise<SigningKey> {
  if (privateKey.asymmetricKeyType !== "ec" || privateKey.asymmetricKeyDetails?.namedCurve !== "prime256v1") {
    throw new Error("the signing key must be an EC P-256 key (ES256)");
  }
  const { kty, crv, x, y } = createPublicKey(privateKey).export({ format: "jwk" }) as JWK;
  const base = { kty, crv, x, y } as JWK;
  const kid = await calculateJwkThumbprint(base);
  return { kid, privateKey, publicJwk: { ...base, kid, alg: "ES256", use: "sig" } };
}

async function loadOrCreateFileKey(dataDir: string): Promise<SigningKey> {
  const path = join(dataDir, KEY_FILE);
  let text: string | undefined;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  if (text !== undefined) return keyFromConfig(text);
  const privateKey = newP256PrivateKey();
  await writeKeyFile(dataDir, privateKey);
  return toSigningKey(privateKey);
}

async function writeKeyFile(dataDir: string, privateKey: KeyObject): Promise<void> {
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, KEY_FILE);
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(privateKey.export({ format: "jwk" })), { mode: 0o600 });
  await rename(tmp, path);
}
