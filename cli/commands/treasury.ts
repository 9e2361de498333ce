import { TreasuryStatus, type Treasury } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import type { CommandContext } from "./types.js";
import { currencyOption, intOption, requireOption, requirePositional, UsageError } from "./types.js";

const statuses: Record<string, TreasuryStatus> = {
  active: TreasuryStatus.ACTIVE,
  suspended: TreasuryStatus.SUSPENDED,
  disabled: TreasuryStatus.DISABLED,
  mandate_expired: TreasuryStatus.MANDATE_EXPIRED,
};

const statusName = (s: TreasuryStatus) => Object.keys(statuses).find((k) => statuses[k] === s) ?? "unspecified";

const cents = (v: bigint | undefined) => (v === undefined ? null : Number(v));

function treasuryJson(t: Treasury) {
  return {
    client_id: t.clientId,
    status: statusName(t.status),
    payer_entity_id: t.payerEntityId,
    currency: t.currency,
    available_cents: Number(t.availableCents),
    cap_per_item_cents: cents(t.capPerItemCents),
    cap_per_day_cents: cents(t.capPerDayCents),
    cap_lifetime_cents: cents(t.capLifetimeCents),
    step_up_amount_cents: cents(t.stepUpAmountCents),
  };
}

const optionalCents = (ctx: CommandContext, name: string) => {
  const v = intOption(ctx, name, false);
  return v === undefined ? undefined : BigInt(v);
};

/** vaultgate treasury bind|set-status|fund */
export async function treasuryCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  switch (sub) {
    case "bind": {
      const clientId = requireOption(ctx, "partner");
      const payerEntityId = requireOption(ctx, "payer-entity-id");
      const balance = intOption(ctx, "balance-cents")!;
      const request = {
        clientId,
        payerEntityId,
        balanceCents: BigInt(balance),
        currency: currencyOption(ctx),
        capPerItemCents: optionalCents(ctx, "cap-per-item"),
        capPerDayCents: optionalCents(ctx, "cap-per-day"),
        capLifetimeCents: optionalCents(ctx, "cap-lifetime"),
        stepUpAmountCents: optionalCents(ctx, "step-up-amount"),
      };
      const { treasury } = (await ctx.admin()).clients;
      const res = await treasury.bindTreasury(request);
      return { ...treasuryJson(res.treasury!), created: res.created };
    }
    case "set-status": {
      const clientId = requirePositional(ctx, 1, "CLIENT_ID");
      const name = requirePositional(ctx, 2, "STATUS");
      // Own keys only: "constructor" or "__proto__" would find Object.prototype's members.
      const status = Object.hasOwn(statuses, name) ? statuses[name] : undefined;
      if (status === undefined) throw new UsageError(`status must be one of ${Object.keys(statuses).join("|")}`);
      const res = await (await ctx.admin()).clients.treasury.setTreasuryStatus({ clientId, status });
      return treasuryJson(res.treasury!);
    }
    case "fund": {
      const clientId = requirePositional(ctx, 1, "CLIENT_ID");
      const amount = intOption(ctx, "amount-cents", true, 1)!;
      const res = await (await ctx.admin()).clients.treasury.fundTreasury({ clientId, amountCents: BigInt(amount) });
      return treasuryJson(res.treasury!);
    }
    default:
      throw new UsageError("treasury bind|set-status|fund");
  }
}
