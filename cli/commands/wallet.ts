import { isEvmChain, EVM_CHAINS, formatUsdc } from "../../core/settlement/rules.js";
import type { CommandContext } from "./types.js";
import { requireOption, UsageError } from "./types.js";

/**
 * `vaultgate wallet address|balance --chain C`: the hot wallet a chain pays from, with the same
 * key `serve` uses, so an operator funds exactly the address that pays.
 */
export async function walletCommand(ctx: CommandContext) {
  const chain = requireOption(ctx, "chain");
  if (!isEvmChain(chain)) throw new UsageError(`--chain must be one of ${EVM_CHAINS.join(", ")} (sol settles on the sandbox rail and has no hot wallet)`);
  const settings = ctx.config.settlement.evm.find((s) => s.chain === chain);
  const { loadHotWallet } = await import("../../core/settlement/wallet.js");
  const account = await loadHotWallet({ chain, keyFile: settings?.walletKeyFile, dataDir: ctx.config.dataDir });
  if (ctx.positionals[0] === "address") return { chain, rail: settings ? "evm" : "sandbox", address: account.address };
  // The command line is right; the settings are not: exit 1, not a usage error.
  if (!settings)
    throw new Error(
      `chain ${chain} settles on the sandbox rail: set CHAIN_${chain.toUpperCase()}_RAIL=evm with its RPC URL and USDC contract to read a balance`,
    );
  const { createEvmRail } = await import("../../core/settlement/evm-rail.js");
  const rail = createEvmRail(settings, account);
  let units: bigint;
  try {
    units = await rail.usdcBalance();
  } catch (err) {
    throw new Error(`cannot read the balance from CHAIN_${chain.toUpperCase()}_RPC_URL: ${(err as Error).message.split("\n")[0]}`);
  }
  return { chain, address: account.address, usdc_contract: settings.usdc, balance_usdc: formatUsdc(units), balance_units: units.toString() };
}
