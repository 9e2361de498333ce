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
  if (options.keyFile) return (await parseKeyFile(options.chain, options.keyFile, "setting"))!;
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
  // Gone again between writing and reading (removed meanwhile): as good as a file without a key.
  return (await parseKeyFile(options.chain, path, "dataDir")) ?? fail(noKeyIn(path, options.chain));
}

/** The hot wallet as `loadHotWallet` finds it, without making a key: undefined when DATA_DIR holds none. */
export async function readHotWallet(options: { chain: string; keyFile?: string; dataDir: string }): Promise<PrivateKeyAccount | undefined> {
  if (options.keyFile) return parseKeyFile(options.chain, options.keyFile, "setting");
  return parseKeyFile(options.chain, walletKeyPath(options.dataDir, options.chain), "dataDir");
}

const keyFileSetting = (chain: string) => `CHAIN_${chain.toUpperCase()}_WALLET_KEY_FILE`;
const noKeyIn = (path: string, chain: string) => `${path} does not hold a private key; restore it or set ${keyFileSetting(chain)}`;

/**
 * The account in a key file, read by serve and the wallet commands alike. One the operator named
 * (`from` "setting") must exist; DATA_DIR's may not yet (undefined). A file without a key is refused.
 */
async function parseKeyFile(chain: string, path: string, from: "setting" | "dataDir"): Promise<PrivateKeyAccount | undefined> {
  const setting = keyFileSetting(chain);
  const text = await readKey(path);
  if (text === undefined) return from === "setting" ? fail(`${setting} names ${path}, which does not exist`) : undefined;
  return parse(text) ?? fail(from === "setting" ? `${path} (${setting}) must hold a private key: 0x and 64 hexadecimal digits` : noKeyIn(path, chain));
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
