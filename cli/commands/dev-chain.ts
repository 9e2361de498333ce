import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createPublicClient, createWalletClient, http, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { loadHotWallet } from "../../core/settlement/wallet.js";
import { usdcArtifact } from "../usdc-contract.js";
import type { CommandContext } from "./types.js";
import { intOption, UsageError } from "./types.js";

/** anvil's first dev account: public, funded by anvil itself; it deploys and mints the local USDC. */
const DEPLOYER_KEY: Hex = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const CHAIN_ID = 31337;
/** What each hot wallet is funded with: 1,000,000 USDC and 100 ETH for gas. */
const FUND_USDC_UNITS = 1_000_000n * 1_000_000n;
const FUND_GAS_WEI = 100n * 10n ** 18n;
const CHAINS = ["eth", "base"] as const;

/**
 * `vaultgate dev chain [--port P] [--format env]`: a local anvil chain with USDC deployed and
 * the hot wallets funded, printing the settings `serve` needs to settle on it (docs/cli.md).
 */
export async function devChainCommand(ctx: CommandContext) {
  if (ctx.positionals[0] !== "chain") throw new UsageError("dev chain [--port P] [--format env]");
  const port = (ctx.options.port === undefined ? 8545 : intOption(ctx, "port"))!;
  if (port < 1 || port > 65535) throw new UsageError("--port must be from 1 to 65535");
  const quiet = ctx.options.format === "env";
  const say = (line: string) => process.stderr.write(`${line}\n`);

  const require = createRequire(import.meta.url);
  const pkg = `@foundry-rs/anvil-${process.platform}-${process.arch === "x64" ? "amd64" : process.arch}`;
  let binary: string;
  try {
    binary = join(dirname(require.resolve(`${pkg}/package.json`)), "bin", process.platform === "win32" ? "anvil.exe" : "anvil");
  } catch {
    throw new Error(`anvil is not installed for this platform (${pkg}); install the dev dependencies (npm ci)`);
  }
  const child = spawn(binary, ["--port", String(port), "--host", "127.0.0.1", "--chain-id", String(CHAIN_ID), "--silent"], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  const exited = new Promise<number>((resolve) => child.once("exit", (code) => resolve(code ?? 1)));
  const stop = () => child.kill("SIGTERM");
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const url = `http://127.0.0.1:${port}`;
  try {
    const client = createPublicClient({ transport: http(url, { retryCount: 0 }) });
    for (let i = 0; ; i++) {
      if (child.exitCode !== null) throw new Error(`anvil exited (${child.exitCode}); is port ${port} taken? (--port P)`);
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
    const chain = { id: CHAIN_ID, name: "anvil", nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 }, rpcUrls: { default: { http: [url] } } };
    const deployer = createWalletClient({ account: privateKeyToAccount(DEPLOYER_KEY), transport: http(url), chain });
    const { abi, bytecode } = await usdcArtifact();
    const deployed = await client.waitForTransactionReceipt({ hash: await deployer.deployContract({ abi, bytecode }), pollingInterval: 50 });
    const usdc = deployed.contractAddress!;
    const lines: string[] = [];
    for (const name of CHAINS) {
      const wallet = await loadHotWallet({ chain: name, dataDir: ctx.config.dataDir });
      await client.request({ method: "anvil_setBalance" as never, params: [wallet.address, `0x${FUND_GAS_WEI.toString(16)}`] as never });
      await client.waitForTransactionReceipt({
        hash: await deployer.writeContract({ address: usdc, abi, functionName: "mint", args: [wallet.address, FUND_USDC_UNITS] }),
        pollingInterval: 50,
      });
      const p = `CHAIN_${name.toUpperCase()}_`;
      lines.push(`${p}RAIL=evm`, `${p}RPC_URL=${url}`, `${p}USDC=${usdc}`, `${p}CHAIN_ID=${CHAIN_ID}`, `${p}CONFIRMATIONS=1`, `${p}FINALITY_BLOCKS=12`);
      if (!quiet) say(`${name}: hot wallet ${wallet.address} funded with 1,000,000 USDC`);
    }
    if (!quiet) say(`local chain on ${url} (chain id ${CHAIN_ID}), USDC at ${usdc}; settings for vaultgate serve (same DATA_DIR):`);
    process.stdout.write(lines.map((l) => `${l}\n`).join(""));
    if (!quiet) say("running until Ctrl-C");
  } catch (err) {
    stop();
    await exited;
    throw err;
  }
  await exited;
  process.off("SIGINT", stop);
  process.off("SIGTERM", stop);
  return undefined;
}
