import type { CommandContext } from "./types.js";
import { intOption, requirePositional, UsageError } from "./types.js";

/** vaultgate vault fund VAULT_ID --amount-cents N */
export async function vaultCommand(ctx: CommandContext) {
  if (ctx.positionals[0] !== "fund") throw new UsageError("vault fund VAULT_ID --amount-cents N");
  const vaultId = requirePositional(ctx, 1, "VAULT_ID");
  const amountCents = intOption(ctx, "amount-cents", true, 1)!;
  const res = await (await ctx.admin()).clients.budgets.fundVault({ vaultId, amountCents: BigInt(amountCents) });
  return { vault_id: res.vaultId, balance_cents: Number(res.balanceCents), currency: res.currency };
}
