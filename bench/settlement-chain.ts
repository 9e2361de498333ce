/**
 * The settlement bench's chain: a local anvil producing a block every second, USDC from
 * contracts/USDC.sol deployed, and the hot wallet of a DATA_DIR funded with USDC and gas
 * as `vaultgate dev chain` does it (the same artifact and hot wallet code).
 */
import { spawn } from "node:child_process";
import { createPublicClient, createWalletClient, erc20Abi, http, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { usdcArtifact } from "../cli/usdc-contract.js";
import { loadHotWallet } from "../core/settlement/wallet.js";
import { ANVIL_CHAIN_ID, ANVIL_DEPLOYER_KEY, anvilBinary } from "../test/support/anvil.js";

/** What the hot wallet gets, as `vaultgate dev chain` gives it: 1,000,000 USDC and 100 ETH. */
export const FUND_USDC_UNITS = 1_000_000n * 1_000_000n;
const FUND_GAS_WEI = 100n * 10n ** 18n;

export interface BenchChain {
  url: string;
  usdc: Hex;
  wallet: Hex;
  /** The `CHAIN_<NAME>_*` settings that put `chain` on the evm rail on this node. */
  env(chain: string): Record<string, string>;
  usdcBalance(of: string): Promise<bigint>;
  stop(): Promise<void>;
}

/**
 * `--block-time 1`, not automine: under automine a block only comes with a transaction, so
 * the last payments of a run would wait for traffic that never comes to get deep enough.
 */
export async function startBenchChain(port: number, chain: string, dataDir: string): Promise<BenchChain> {
  const child = spawn(anvilBinary(), ["--port", String(port), "--host", "127.0.0.1", "--chain-id", String(ANVIL_CHAIN_ID), "--block-time", "1", "--silent"], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const client = createPublicClient({ transport: http(url, { retryCount: 0 }) });
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`anvil exited (${child.exitCode}); is port ${port} taken?`);
    if (
      await client.getChainId().then(
        () => true,
        () => false,
      )
    )
      break;
    if (i > 200) throw new Error(`anvil did not answer on ${url}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const viemChain = {
    id: ANVIL_CHAIN_ID,
    name: "anvil",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [url] } },
  };
  const deployer = createWalletClient({ account: privateKeyToAccount(ANVIL_DEPLOYER_KEY), transport: http(url), chain: viemChain });
  const { abi, bytecode } = await usdcArtifact();
  const usdc = (await client.waitForTransactionReceipt({ hash: await deployer.deployContract({ abi, bytecode }), pollingInterval: 100 })).contractAddress!;
  const wallet = await loadHotWallet({ chain, dataDir });
  await client.request({ method: "anvil_setBalance" as never, params: [wallet.address, `0x${FUND_GAS_WEI.toString(16)}`] as never });
  await client.waitForTransactionReceipt({
    hash: await deployer.writeContract({ address: usdc, abi, functionName: "mint", args: [wallet.address, FUND_USDC_UNITS] }),
    pollingInterval: 100,
  });
  return {
    url,
    usdc,
    wallet: wallet.address,
    env(name) {
      const p = `CHAIN_${name.toUpperCase()}_`;
      return {
        [`${p}RAIL`]: "evm",
        [`${p}RPC_URL`]: url,
        [`${p}USDC`]: usdc,
        [`${p}CHAIN_ID`]: String(ANVIL_CHAIN_ID),
        [`${p}CONFIRMATIONS`]: "1",
        [`${p}FINALITY_BLOCKS`]: "12",
      };
    },
    usdcBalance: (of) => client.readContract({ address: usdc, abi: erc20Abi, functionName: "balanceOf", args: [of as Hex] }),
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
