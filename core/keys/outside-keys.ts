import { hkdfSync, randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Db } from "../db/knex.js";
import { recordKeyCheck } from "./store.js";
import { constantTimeEqualBytes, hmacSha256 } from "../../lib/crypto.js";

/**
 * Keys for secrets stored in the database live outside it (a setting, else a 0600 file in DATA_DIR,
 * else one per process), so a database dump alone reveals nothing they protect.
 */
export type OutsideKeyName = "webhook-secret-key" | "signin-code-key";

export class OutsideKeyError extends Error {}

const perProcess = new Map<OutsideKeyName, Buffer>();

/** 32 bytes written as base64, base64url or hex (64 hex digits). */
export function parseOutsideKey(text: string): Buffer | undefined {
  const t = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return Buffer.from(t, "hex");
  if (!/^[A-Za-z0-9+/_-]{43}=?$/.test(t)) return undefined;
  const key = Buffer.from(t.replace(/-/g, "+").replace(/_/g, "/"), "base64");
  return key.length === 32 ? key : undefined;
}

export async function loadOutsideKey(options: { name: OutsideKeyName; setting: string; fromEnv?: string; dataDir?: string }): Promise<Buffer> {
  if (options.fromEnv !== undefined && options.fromEnv !== "") {
    // The message names the setting, never its value.
    return parseOutsideKey(options.fromEnv) ?? fail(`${options.setting} must be 32 random bytes as base64 or 64 hex digits (e.g. \`openssl rand -base64 32\`)`);
  }
  if (!options.dataDir) {
    let key = perProcess.get(options.name);
    if (!key) perProcess.set(options.name, (key = randomBytes(32)));
    return key;
  }
  const path = join(options.dataDir, options.name);
  const existing = await readKeyFile(path);
  if (existing) return parseOutsideKey(existing) ?? fail(`${path} does not hold a 32-byte key; restore it or set ${options.setting}`);
  await mkdir(options.dataDir, { recursive: true, mode: 0o700 });
  // "wx": a concurrent first start keeps whichever file landed first; both then read it.
  await writeFile(path, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600, flag: "wx" }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "EEXIST") throw err;
  });
  const text = await readKeyFile(path);
  return (text && parseOutsideKey(text)) || fail(`${path} does not hold a 32-byte key`);
}

/**
 * The first core records a check value (an HMAC under a sub-key, revealing nothing), so a replica
 * with a different key fails at start, naming the setting, not later when reading others' writes.
 */
async function checkOutsideKey(db: Db, options: { name: OutsideKeyName; setting: string; key: Buffer }): Promise<void> {
  const mine = Buffer.from(hmacSha256(deriveKey(options.key, "key check"), options.name), "hex");
  const recorded = await recordKeyCheck(db, options.name, mine);
  if (!constantTimeEqualBytes(recorded, mine)) {
    fail(
      `${options.setting} is not the key that protects what this database already holds (every core replica needs the same ${options.setting}; a key file generated into DATA_DIR belongs to one process)`,
    );
  }
}

/** loadOutsideKey, then checkOutsideKey: the key every start uses. */
export async function loadCheckedOutsideKey(db: Db, options: { name: OutsideKeyName; setting: string; fromEnv?: string; dataDir?: string }): Promise<Buffer> {
  const key = await loadOutsideKey(options);
  await checkOutsideKey(db, { name: options.name, setting: options.setting, key });
  return key;
}

/** A sub-key for one purpose, so one outside key never serves two algorithms. */
export function deriveKey(key: Buffer, purpose: string): Buffer {
  return Buffer.from(hkdfSync("sha256", key, Buffer.alloc(0), `vaultgate ${purpose}`, 32));
}

async function readKeyFile(path: string): Promise<string | undefined> {
  try {
    return (await readFile(path, "utf8")).trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

function fail(message: string): never {
  throw new OutsideKeyError(message);
}
