import { EVM_CHAINS, evmAddressProblem, type EvmChain, type RailKind } from "./rules.js";

/**
 * Which rail serves each chain, from settings named per chain (`CHAIN_<NAME>_...`, the
 * name in upper case). Every chain is on the sandbox rail unless CHAIN_<NAME>_RAIL=evm;
 * `sol` can only be on the sandbox rail. A bad setting refuses the start, naming it.
 */
export interface EvmChainSettings {
  chain: EvmChain;
  rail: "evm";
  rpcUrl: string;
  /** The USDC contract, checksummed or lower case as given. */
  usdc: `0x${string}`;
  /** The chain id the RPC must report (CHAIN_<NAME>_CHAIN_ID; default the public network's). */
  chainId: number;
  /** Blocks deep a transfer must be to count as completed (1 = mined). */
  confirmations: number;
  /** Blocks deep after which a completed transfer is no longer watched for a reorg. */
  finalityBlocks: number;
  /** A payment not yet mined this long after it was accepted is cancelled and refunded. */
  expirySeconds: number;
  /** The hot wallet's key file; absent = a file in DATA_DIR generated on first use. */
  walletKeyFile?: string;
  /** Longest one JSON-RPC call may take. */
  rpcTimeoutMs: number;
  /** The block the hot wallet was created or first funded in: `ledger verify --chains` reads from it (default 0). */
  startBlock?: number;
  /** The most the hot wallet offers per gas, in wei (CHAIN_<NAME>_MAX_FEE_GWEI); absent = the node's ask. */
  maxFeePerGas?: bigint;
  /** Earlier hot wallets of this chain (lower case) whose signed payments a core reconciles without their key. */
  retiredWallets?: string[];
  /** The smallest payment accepted, in cents (CHAIN_<NAME>_MIN_AMOUNT_CENTS); absent = 1. Each transfer costs the platform gas. */
  minAmountCents?: number;
}

export type ChainSettings = { chain: string; rail: "sandbox" } | EvmChainSettings;

export interface SettlementSettings {
  /** Chains on the evm rail; every other chain settles on the sandbox rail. */
  evm: EvmChainSettings[];
  /** CHAIN_<NAME>_WALLET_KEY_FILE of chains kept on the sandbox rail: the key they will pay from on the evm rail. */
  sandboxWalletKeyFiles?: Partial<Record<string, string>>;
}

/** One dollar: below it a transfer's gas can cost the platform more than the payment is worth. */
export const DEFAULT_MIN_AMOUNT_CENTS = 100;

export class SettlementConfigError extends Error {
  override name = "SettlementConfigError";
}

/** The public networks' chain ids. */
export const MAINNET_CHAIN_IDS: Record<EvmChain, number> = { eth: 1, base: 8453, arb: 42161, op: 10, polygon: 137 };
const DEFAULT_CONFIRMATIONS: Record<EvmChain, number> = { eth: 12, base: 12, arb: 12, op: 12, polygon: 64 };

/** The CHAIN_<NAME>_ settings besides RAIL, all read only on the evm rail. */
const EVM_SETTINGS = [
  "RPC_URL",
  "USDC",
  "CHAIN_ID",
  "CONFIRMATIONS",
  "FINALITY_BLOCKS",
  "EXPIRY_SECONDS",
  "WALLET_KEY_FILE",
  "RPC_TIMEOUT_MS",
  "START_BLOCK",
  "MAX_FEE_GWEI",
  "RETIRED_WALLETS",
  "MIN_AMOUNT_CENTS",
] as const;

export function parseSettlementSettings(env: Record<string, string | undefined>): SettlementSettings {
  const rail = (name: string): RailKind => {
    const setting = `CHAIN_${name.toUpperCase()}_RAIL`;
    const value = env[setting] || "sandbox";
    if (value !== "sandbox" && value !== "evm") fail(`${setting} must be sandbox or evm`);
    return value;
  };
  if (rail("sol") !== "sandbox") fail("CHAIN_SOL_RAIL must be sandbox: Solana settles on the sandbox rail only");
  const evm: EvmChainSettings[] = [];
  const sandboxWalletKeyFiles: Partial<Record<string, string>> = {};
  for (const chain of EVM_CHAINS) {
    const p = `CHAIN_${chain.toUpperCase()}_`;
    // A chain configured but with its rail left out would settle on the sandbox rail, paying nothing.
    const stray = EVM_SETTINGS.find((s) => env[`${p}${s}`]);
    if (stray && !env[`${p}RAIL`]) {
      fail(`${p}${stray} is set but ${p}RAIL is not: set ${p}RAIL=evm to settle ${chain} on chain, or ${p}RAIL=sandbox to keep the sandbox rail`);
    }
    if (rail(chain) !== "evm") {
      if (env[`${p}WALLET_KEY_FILE`]) sandboxWalletKeyFiles[chain] = env[`${p}WALLET_KEY_FILE`];
      continue;
    }
    const rpcUrl = env[`${p}RPC_URL`] ?? "";
    if (!rpcUrl) fail(`${p}RPC_URL is required when ${p}RAIL=evm`);
    let url: URL;
    try {
      url = new URL(rpcUrl);
    } catch {
      fail(`${p}RPC_URL must be an http(s) URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") fail(`${p}RPC_URL must be an http(s) URL`);
    const usdc = env[`${p}USDC`] ?? "";
    if (!usdc) fail(`${p}USDC (the USDC contract address) is required when ${p}RAIL=evm`);
    const problem = evmAddressProblem(usdc);
    if (problem) fail(`${p}USDC ${problem}`);
    const confirmations = int(env, `${p}CONFIRMATIONS`, DEFAULT_CONFIRMATIONS[chain], 1, 10_000);
    evm.push({
      chain,
      rail: "evm",
      rpcUrl,
      usdc: usdc as `0x${string}`,
      chainId: int(env, `${p}CHAIN_ID`, MAINNET_CHAIN_IDS[chain], 1, Number.MAX_SAFE_INTEGER),
      confirmations,
      finalityBlocks: int(env, `${p}FINALITY_BLOCKS`, Math.max(64, confirmations * 2), confirmations, 100_000),
      expirySeconds: int(env, `${p}EXPIRY_SECONDS`, 3600, 10, 30 * 86_400),
      walletKeyFile: env[`${p}WALLET_KEY_FILE`] || undefined,
      rpcTimeoutMs: int(env, `${p}RPC_TIMEOUT_MS`, 10_000, 100, 120_000),
      startBlock: int(env, `${p}START_BLOCK`, 0, 0, Number.MAX_SAFE_INTEGER),
      maxFeePerGas: gwei(env, `${p}MAX_FEE_GWEI`),
      retiredWallets: addresses(env, `${p}RETIRED_WALLETS`),
      minAmountCents: int(env, `${p}MIN_AMOUNT_CENTS`, DEFAULT_MIN_AMOUNT_CENTS, 1, Number.MAX_SAFE_INTEGER),
    });
  }
  return { evm, sandboxWalletKeyFiles };
}

function int(env: Record<string, string | undefined>, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) fail(`${name} must be a whole number from ${min} to ${max}`);
  return Number(raw);
}

/** A fee in gwei (up to 9 decimals, so down to 1 wei), as wei; undefined when unset. */
function gwei(env: Record<string, string | undefined>, name: string): bigint | undefined {
  const raw = env[name];
  if (raw === undefined || raw === "") return undefined;
  const m = /^(\d{1,7})(?:\.(\d{1,9}))?$/.exec(raw);
  const wei = m ? BigInt(m[1]!) * 1_000_000_000n + BigInt((m[2] ?? "").padEnd(9, "0")) : 0n;
  if (wei === 0n) fail(`${name} must be a number of gwei above 0 and below 10,000,000, with at most 9 decimals (such as 50 or 0.05)`);
  return wei;
}

/** A comma-separated list of up to 32 addresses, lower case and each once; empty when unset. */
function addresses(env: Record<string, string | undefined>, name: string): string[] {
  const items = (env[name] ?? "")
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a !== "");
  if (items.length > 32) fail(`${name} lists ${items.length} addresses; at most 32`);
  for (const a of items) {
    const problem = evmAddressProblem(a);
    if (problem) fail(`${name}: ${a} ${problem}`);
  }
  return [...new Set(items.map((a) => a.toLowerCase()))];
}

function fail(message: string): never {
  throw new SettlementConfigError(message);
}
