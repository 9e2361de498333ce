import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { mkdir, readFile, writeFile, rename } from "node:fs/promises";
import { join } from "node:path";
import { calculateJwkThumbprint, type JWK } from "jose";
import type { Logger } from "pino";
import type { Db } from "../db/knex.js";
import { createKeysStore } from "./store.js";

export interface KeyringOptions {
  /** SIGNING_KEY: an ES256 private JWK (JSON) or PKCS#8 PEM. Wins over dataDir. */
  signingKey?: string;
  /** Where the generated dev key lives when signingKey is not set; absent = in memory. */
  dataDir?: string;
  db: Db;
  logger: Logger;
  clock: () => Date;
}

export interface SigningKey {
  kid: string;
  privateKey: KeyObject;
  publicJwk: JWK;
}

export interface Keyring {
  /** The current signing key, or undefined when key configuration is missing or malformed. */
  current(): SigningKey | undefined;
  /** Why current() is undefined, for logs and readiness (never the key itself). */
  problem(): string | undefined;
  /** Every published public key: this process's current key plus all previously published ones. */
  jwks(): Promise<{ keys: JWK[] }>;
  /** Replaces the current key; previous public keys stay published. */
  rotate(): Promise<{ kid: string; publishedKids: string[] }>;
  /** Signs a compact JWS (ES256) with the current key. Synchronous: no thread-pool hop. */
  signJwt(header: Record<string, unknown>, payload: Record<string, unknown>): string;
  readonly source: "env" | "file" | "memory";
}

const KEY_FILE = "signing-key.json";

/** Loads or creates the signing key and publishes its public half. Never throws on bad config. */
export async function createKeyring(options: KeyringOptions): Promise<Keyring> {
  const store = createKeysStore(options.db);
  const source = options.signingKey !== undefined ? "env" : options.dataDir ? "file" : "memory";
  let current: SigningKey | undefined;
  let problem: string | undefined;

  try {
    if (source === "env") current = await keyFromConfig(options.signingKey!);
    else if (source === "file") current = await loadOrCreateFileKey(options.dataDir!);
    else current = await toSigningKey(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey);
  } catch (err) {
    // spec 5.2 / DESIGN 2: a malformed key gives 503s, never a crash. The message names
    // the setting, not its value.
    problem = `signing key unusable: ${err instanceof Error ? err.message : "invalid"}`;
    options.logger.error({ source }, problem);
  }
  if (current) await store.publish(current.kid, current.publicJwk, options.clock());

  return {
    source,
    current: () => current,
    problem: () => problem,
    async jwks() {
      const published = await store.listPublished();
      const keys = published.map((k) => k.jwk);
      if (current && !published.some((k) => k.kid === current!.kid)) keys.unshift(current.publicJwk);
      return { keys };
    },
    async rotate() {
      if (source === "env") {
        throw new KeyringError("the signing key comes from SIGNING_KEY; rotate it there (the previous public key stays published)");
      }
      const next = await toSigningKey(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey);
      await store.publish(next.kid, next.publicJwk, options.clock());
      if (source === "file") await writeKeyFile(options.dataDir!, next.privateKey);
      current = next;
      problem = undefined;
      const published = await store.listPublished();
      return { kid: next.kid, publishedKids: published.map((k) => k.kid) };
    },
    signJwt(header, payload) {
      if (!current) throw new KeyringError(problem ?? "no signing key");
      const input = `${b64json({ ...header, alg: "ES256", kid: current.kid })}.${b64json(payload)}`;
      const signature = sign("sha256", Buffer.from(input), { key: current.privateKey, dsaEncoding: "ieee-p1363" });
      return `${input}.${signature.toString("base64url")}`;
    },
  };
}

/** A key operation that cannot be done with the current configuration. */
export class KeyringError extends Error {
  override name = "KeyringError";
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
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
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
