import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { SettlementConfigError } from "./config.js";

/**
 * The hot wallet a chain pays from. Its private key never enters the database: it is the
 * operator's key file (CHAIN_<NAME>_WALLET_KEY_FILE), else a 0600 file in DATA_DIR made on
 * first use, else (no DATA_DIR: tests, throwaway cores) one key per process and chain.
 */
const perProcess = new Map<string, PrivateKeyAccount>();

export const walletKeyPath = (dataDir: string, chain: string) => join(dataDir, `settlement-wallet-${chain}.key`);

export async function loadHotWallet(options: { chain: string; keyFile?: string; dataDir?: string }): Promise<PrivateKeyAccount> {
  const setting = `CHAIN_${options.chain.toUpperCase()}_WALLET_KEY_FILE`;
  if (options.keyFile) {
    const text = await readKey(options.keyFile);
    if (text === undefined) fail(`${setting} names ${options.keyFile}, which does not exist`);
    return parse(text) ?? fail(`${options.keyFile} (${setting}) must hold a private key: 0x and 64 hexadecimal digits`);
  }
  if (!options.dataDir) {
    let account = perProcess.get(options.chain);
    if (!account) perProcess.set(options.chain, (account = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`)));
    return account;
  }
  const path = walletKeyPath(options.dataDir, options.chain);
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  // "wx": of two first starts, whichever file landed first is the key; both then read it.
  await writeFile(path, `0x${randomBytes(32).toString("hex")}\n`, { mode: 0o600, flag: "wx" }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "EEXIST") throw err;
  });
  const text = await readKey(path);
  return (text !== undefined && parse(text)) || fail(`${path} does not hold a private key; restore it or set ${setting}`);
}

/** The hot wallet as `loadHotWallet` finds it, without making a key: undefined when DATA_DIR holds none. */
export async function readHotWallet(options: { chain: string; keyFile?: string; dataDir: string }): Promise<PrivateKeyAccount | undefined> {
  if (options.keyFile) return loadHotWallet(options);
  const path = walletKeyPath(options.dataDir, options.chain);
  const text = await readKey(path);
  if (text === undefined) return undefined;
  return parse(text) ?? fail(`${path} does not hold a private key; restore it or set CHAIN_${options.chain.toUpperCase()}_WALLET_KEY_FILE`);
}

function parse(text: string): PrivateKeyAccount | undefined {
  const t = text.trim();
  if (!/^0x[0-9a-fA-F]{64}$/.test(t)) return undefined;
  try {
    return privateKeyToAccount(t as `0x${string}`);
  } catch {
    return undefined; // zero or above the curve order
  }
}

async function readKey(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

function fail(message: string): never {
  throw new SettlementConfigError(message);
}
