import type { CommandContext } from "./types.js";
import { intOption, requireOption, requirePositional, UsageError } from "./types.js";

/** vaultgate ledger record USER_ID --direction credit|debit --amount-cents N [--currency USD] [--status settled] */
export async function ledgerCommand(ctx: CommandContext) {
  if (ctx.positionals[0] !== "record") throw new UsageError("ledger record USER_ID --direction credit|debit --amount-cents N [--currency USD] [--status settled]");
  const { partnerResources } = (await ctx.admin()).clients;
  const res = await partnerResources.recordLedgerEntry({
    userId: requirePositional(ctx, 1, "USER_ID"),
    direction: requireOption(ctx, "direction"),
    amountCents: BigInt(intOption(ctx, "amount-cents")!),
    currency: (ctx.options.currency as string | undefined) ?? "USD",
    status: (ctx.options.status as string | undefined) ?? "settled",
  });
  const t = res.transfer!;
  return {
    user_id: requirePositional(ctx, 1, "USER_ID"),
    transfer_id: t.transferId,
    direction: t.direction,
    amount_cents: Number(t.amountCents),
    currency: t.currency,
    status: t.status,
    created_at: t.createdAt,
  };
}
