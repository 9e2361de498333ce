import type { EvmChain } from "../../core/settlement/rules.js";
import { loadHotWallet } from "../../core/settlement/wallet.js";
import { ANVIL_CHAIN_ID, deployLocalUsdc, fundLocalWallet, LOCAL_FUND_GAS_WEI, LOCAL_FUND_USDC_UNITS, localChainSettings, spawnAnvil } from "../local-chain.js";
import type { CommandContext } from "./types.js";
import { intOption, UsageError } from "./types.js";

/** The chains `dev chain` puts on its one anvil node. */
const CHAINS: readonly EvmChain[] = ["eth", "base"];

/**
 * `vaultgate dev chain [--port P] [--format env]`: a local anvil chain with USDC deployed and
 * the hot wallets funded, printing the settings `serve` needs to settle on it (docs/cli.md).
 */
export async function devChainCommand(ctx: CommandContext) {
  if (ctx.positionals[0] !== "chain") throw new UsageError("dev chain [--port P] [--format env]");
  // Its output is settings lines, never JSON: refuse a format it would not honour.
  const format = ctx.options.format;
  if (format !== undefined && format !== "text" && format !== "env") throw new UsageError("--format must be text or env");
  const port = intOption(ctx, "port", false, 1, 65535) ?? 8545;
  const quiet = ctx.options.format === "env";
  const say = (line: string) => process.stderr.write(`${line}\n`);

  const anvil = await spawnAnvil(port, [], ["ignore", "ignore", "inherit"]);
  const exited = new Promise<number>((resolve) => anvil.child.once("exit", (code) => resolve(code ?? 1)));
  const stop = () => anvil.child.kill("SIGTERM");
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const url = anvil.url;
  try {
    const usdc = await deployLocalUsdc(url);
    const lines: string[] = [];
    for (const name of CHAINS) {
      const wallet = await loadHotWallet({ chain: name, dataDir: ctx.config.dataDir });
      await fundLocalWallet(url, usdc, wallet.address, LOCAL_FUND_USDC_UNITS, LOCAL_FUND_GAS_WEI);
      for (const [key, value] of Object.entries(localChainSettings(name, url, usdc))) lines.push(`${key}=${value}`);
      if (!quiet) say(`${name}: hot wallet ${wallet.address} funded with 1,000,000 USDC`);
    }
    if (!quiet) say(`local chain on ${url} (chain id ${ANVIL_CHAIN_ID}), USDC at ${usdc}; settings for vaultgate serve (same DATA_DIR):`);
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
