/**
 * The settlement bench's chain: a local anvil producing a block every second, USDC from
 * contracts/USDC.sol deployed, and the hot wallet of a DATA_DIR funded with USDC and gas
 * as `vaultgate dev chain` does it (the same artifact and hot wallet code).
 */
import { createPublicClient, erc20Abi, http, type Hex } from "viem";
import { deployLocalUsdc, fundLocalWallet, LOCAL_FUND_GAS_WEI, LOCAL_FUND_USDC_UNITS, localChainSettings, spawnAnvil } from "../cli/local-chain.js";
import { loadHotWallet } from "../core/settlement/wallet.js";

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
  const anvil = await spawnAnvil(port, ["--block-time", "1"], ["ignore", "ignore", "inherit"]);
  const { child, url } = anvil;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const client = createPublicClient({ transport: http(url, { retryCount: 0 }) });
  const usdc = await deployLocalUsdc(url, 100);
  const wallet = await loadHotWallet({ chain, dataDir });
  await fundLocalWallet(url, usdc, wallet.address, LOCAL_FUND_USDC_UNITS, LOCAL_FUND_GAS_WEI, 100);
  return {
    url,
    usdc,
    wallet: wallet.address,
    env: (name) => localChainSettings(name, url, usdc),
    usdcBalance: (of) => client.readContract({ address: usdc, abi: erc20Abi, functionName: "balanceOf", args: [of as Hex] }),
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}
