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
  // The command line is right; the settings are not: exit 1, not a usage error.
  if (ctx.positionals[0] === "balance" && !settings)
    throw new Error(
      `chain ${chain} settles on the sandbox rail: set CHAIN_${chain.toUpperCase()}_RAIL=evm with its RPC URL and USDC contract to read a balance`,
    );
  const { readHotWallet } = await import("../../core/settlement/wallet.js");
  // Read-only: a key made here would be one no running core pays from, and a wrong DATA_DIR would go unnoticed.
  // On the sandbox rail too: the key file set is the one serve pays from once the chain is put on the evm rail.
  const keyFile = settings?.walletKeyFile ?? ctx.config.settlement.sandboxWalletKeyFiles?.[chain];
  const account = await readHotWallet({ chain, keyFile, dataDir: ctx.config.dataDir });
  if (!account) {
    const name = `CHAIN_${chain.toUpperCase()}`;
    throw new Error(
      `no hot-wallet key for ${chain} found in DATA_DIR (${ctx.config.dataDir}): 'vaultgate serve' makes one there on start when ${name}_RAIL=evm ` +
        `('vaultgate dev chain' for eth and base), or set ${name}_WALLET_KEY_FILE to your key file; run this with the DATA_DIR the service uses`,
    );
  }
  if (ctx.positionals[0] === "address" || !settings) return { chain, rail: settings ? "evm" : "sandbox", address: account.address };
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
