import { type ChildProcess, spawn, type StdioOptions } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createPublicClient, createWalletClient, defineChain, http, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { usdcArtifact } from "./usdc-contract.js";

/** anvil's first dev account (its well-known key), funded by anvil itself: it deploys and mints the local USDC. */
export const ANVIL_DEPLOYER_KEY: Hex = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
export const ANVIL_CHAIN_ID = 31337;
/** What a local hot wallet is funded with: 1,000,000 USDC and 100 ETH for gas. */
export const LOCAL_FUND_USDC_UNITS = 1_000_000n * 1_000_000n;
export const LOCAL_FUND_GAS_WEI = 100n * 10n ** 18n;

/** The anvil binary of the @foundry-rs/anvil platform package (a dev dependency): no fallback, no download. */
function anvilBinary(): string {
  const require = createRequire(import.meta.url);
  const pkg = `@foundry-rs/anvil-${process.platform}-${process.arch === "x64" ? "amd64" : process.arch}`;
  try {
    return join(dirname(require.resolve(`${pkg}/package.json`)), "bin", process.platform === "win32" ? "anvil.exe" : "anvil");
  } catch {
    throw new Error(`anvil is not installed for this platform (${pkg}); install the dev dependencies (npm ci)`);
  }
}

export interface AnvilProcess {
  child: ChildProcess;
  url: string;
}

/**
 * Starts anvil on 127.0.0.1:`port` with `args` after the common ones and resolves once it answers
 * eth_chainId; rejects if it exits first (a taken port, say) or stays silent for `waitMs`.
 */
export async function spawnAnvil(port: number, args: string[], stdio: StdioOptions, waitMs = 10_000): Promise<AnvilProcess> {
  const child = spawn(anvilBinary(), ["--port", String(port), "--host", "127.0.0.1", "--chain-id", String(ANVIL_CHAIN_ID), "--silent", ...args], { stdio });
  // Piped stderr goes into the errors below.
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const url = `http://127.0.0.1:${port}`;
  const client = createPublicClient({ transport: http(url, { retryCount: 0 }) });
  const until = Date.now() + waitMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`anvil exited (${child.exitCode ?? child.signalCode}) before it answered; is port ${port} taken? ${stderr}`.trim());
    }
    const up = await client.getChainId().then(
      () => true,
      () => false,
    );
    if (up) return { child, url };
    if (Date.now() > until) {
      child.kill("SIGKILL");
      throw new Error(`anvil did not answer on ${url} within ${waitMs / 1000} s ${stderr}`.trim());
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The local node as a viem chain, for wallet clients that sign on it. defineChain rather than
 * `viem/chains`' anvil: loading that module (every chain viem knows) takes most of a second.
 */
export function anvilChain(url: string) {
  return defineChain({
    id: ANVIL_CHAIN_ID,
    name: "anvil",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [url] } },
  });
}

/** Deploys contracts/USDC.sol from the deployer account; answers the contract's address once mined. */
export async function deployLocalUsdc(url: string, pollingInterval = 50): Promise<Hex> {
  const client = createPublicClient({ transport: http(url) });
  const deployer = createWalletClient({ account: privateKeyToAccount(ANVIL_DEPLOYER_KEY), transport: http(url), chain: anvilChain(url) });
  const { abi, bytecode } = await usdcArtifact();
  const receipt = await client.waitForTransactionReceipt({ hash: await deployer.deployContract({ abi, bytecode }), pollingInterval });
  return receipt.contractAddress!;
}

/** Gives `address` gas (`gasWei`, set outright) and mints it `usdcUnits` of the local USDC, waiting for the mint. */
export async function fundLocalWallet(url: string, usdc: Hex, address: string, usdcUnits: bigint, gasWei: bigint, pollingInterval = 50): Promise<void> {
  const client = createPublicClient({ transport: http(url) });
  const deployer = createWalletClient({ account: privateKeyToAccount(ANVIL_DEPLOYER_KEY), transport: http(url), chain: anvilChain(url) });
  await client.request({ method: "anvil_setBalance" as never, params: [address, `0x${gasWei.toString(16)}`] as never });
  const { abi } = await usdcArtifact();
  const hash = await deployer.writeContract({ address: usdc, abi, functionName: "mint", args: [address, usdcUnits] });
  await client.waitForTransactionReceipt({ hash, pollingInterval });
}

/** The `CHAIN_<NAME>_*` settings that put chain `name` on the evm rail of this local node. */
export function localChainSettings(name: string, url: string, usdc: Hex): Record<string, string> {
  const p = `CHAIN_${name.toUpperCase()}_`;
  return {
    [`${p}RAIL`]: "evm",
    [`${p}RPC_URL`]: url,
    [`${p}USDC`]: usdc,
    [`${p}CHAIN_ID`]: String(ANVIL_CHAIN_ID),
    [`${p}CONFIRMATIONS`]: "1",
    [`${p}FINALITY_BLOCKS`]: "12",
  };
}
