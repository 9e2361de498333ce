import { timestampDate } from "@bufbuild/protobuf/wkt";
import { PartnerStatus, type Partner } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import type { CommandContext } from "./types.js";
import { listOption, pages, requireOption, requirePositional, UsageError } from "./types.js";

const statusName: Record<PartnerStatus, string> = {
  [PartnerStatus.UNSPECIFIED]: "unspecified",
  [PartnerStatus.ACTIVE]: "active",
  [PartnerStatus.PENDING]: "pending",
  [PartnerStatus.SUSPENDED]: "suspended",
};

function partnerJson(p: Partner) {
  return {
    partner_id: p.partnerId,
    client_id: p.clientId,
    name: p.name,
    status: statusName[p.status],
    entitlements: p.entitlements,
    webhook_url: p.webhookUrl || null,
    // When the URL answered 410 Gone and deliveries paused, until the webhook is set again.
    webhook_gone_at: p.webhookGoneAt ? timestampDate(p.webhookGoneAt).toISOString() : null,
  };
}

/** vaultgate partner create|list|rotate-secret|suspend|activate|entitlements|webhook */
export async function partnerCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  // Checked before connecting: a typo is a usage error even where no credential is found.
  const status = (ctx.options.status as string | undefined) ?? "active";
  if (sub === "create" && status !== "active" && status !== "pending") throw new UsageError("--status must be active or pending");
  const { partners } = (await ctx.admin()).clients;
  switch (sub) {
    case "create": {
      const entitlements = listOption(ctx, "entitlements");
      const res = await partners.createPartner({
        name: requireOption(ctx, "name"),
        slug: (ctx.options.slug as string | undefined) ?? "",
        entitlements: entitlements === undefined ? undefined : { scopes: entitlements },
        status: status === "pending" ? PartnerStatus.PENDING : PartnerStatus.ACTIVE,
        webhookUrl: (ctx.options["webhook-url"] as string | undefined) ?? "",
      });
      const p = res.partner!;
      const out = {
        partner_id: p.partnerId,
        client_id: p.clientId,
        client_secret: res.clientSecret,
        status: statusName[p.status],
        entitlements: p.entitlements,
      };
      // The webhook signing secret is made with the partner, in the same call, and shown once like client_secret.
      return p.webhookUrl ? { ...out, webhook_url: p.webhookUrl, webhook_secret: res.webhookSecret } : out;
    }
    case "list": {
      const { items, nextCursor } = await pages(ctx, async (limit, cursor) => {
        const res = await partners.listPartners({ limit, cursor });
        return { items: res.partners.map(partnerJson), nextCursor: res.nextCursor };
      });
      return { partners: items, next_cursor: nextCursor };
    }
    case "webhook": {
      const clientId = requirePositional(ctx, 1, "CLIENT_ID");
      const url = ctx.options.url;
      if (typeof url !== "string") throw new UsageError('partner webhook CLIENT_ID --url U [--secret whsec_...] (--url "" clears it)');
      const res = await (await ctx.admin()).clients.partnerResources.setWebhook({ clientId, url, secret: (ctx.options.secret as string | undefined) ?? "" });
      const previousUntil = res.previousSecretExpiresAt ? timestampDate(res.previousSecretExpiresAt).toISOString() : null;
      return { client_id: res.clientId, webhook_url: res.url || null, webhook_secret: res.secret || null, previous_secret_expires_at: previousUntil };
    }
    case "rotate-secret": {
      const res = await partners.rotateSecret({ clientId: requirePositional(ctx, 1, "CLIENT_ID") });
      return { client_id: res.clientId, client_secret: res.clientSecret };
    }
    case "suspend":
    case "activate": {
      const status = sub === "suspend" ? PartnerStatus.SUSPENDED : PartnerStatus.ACTIVE;
      const res = await partners.setPartnerStatus({ clientId: requirePositional(ctx, 1, "CLIENT_ID"), status });
      return partnerJson(res.partner!);
    }
    case "entitlements": {
      const set = listOption(ctx, "set");
      if (set === undefined) throw new UsageError('--set a,b is required (--set "" for none)');
      const res = await partners.setEntitlements({ clientId: requirePositional(ctx, 1, "CLIENT_ID"), entitlements: set });
      return partnerJson(res.partner!);
    }
    default:
      throw new UsageError("partner create|list|rotate-secret|suspend|activate|entitlements|webhook");
  }
}
