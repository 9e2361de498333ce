import type { CommandContext } from "./types.js";
import type { User } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { pages, requireOption, requirePositional, UsageError } from "./types.js";
import { KYC_STATUSES, USER_STATUSES } from "../../lib/vocabulary.js";

/** A value core would refuse anyway, refused here as a usage error (exit 2) naming the choices. */
function oneOf(value: string, allowed: readonly string[], what: string): string {
  if (!allowed.includes(value)) throw new UsageError(`${what} must be one of ${allowed.join("|")}`);
  return value;
}

const userJson = (u: User) => ({ user_id: u.userId, email: u.email, status: u.status, vault_id: u.vaultId || null, created_at: u.createdAt });

const USAGE =
  "user create --email E | list | get --email E | set-kyc USER_ID --status S [--provider P] | set-status USER_ID active|inactive | set-email USER_ID --email E | add-wallet USER_ID --chain C --address A | provision-us-account USER_ID";

/** vaultgate user create|list|get|set-kyc|set-status|set-email|add-wallet|provision-us-account */
export async function userCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  // Checked before connecting: a typo is a usage error even where no credential is found.
  if (sub === "set-kyc") oneOf(requireOption(ctx, "status"), KYC_STATUSES, "--status");
  if (sub === "set-status") oneOf(requirePositional(ctx, 2, "active|inactive"), USER_STATUSES, "STATUS");
  const { partners, partnerResources } = (await ctx.admin()).clients;
  switch (sub) {
    case "create": {
      const res = await partners.createUser({ email: requireOption(ctx, "email") });
      return { user_id: res.userId, vault_id: res.vaultId, created: res.created };
    }
    case "list": {
      const { items, nextCursor } = await pages(ctx, async (limit, cursor) => {
        const res = await partners.listUsers({ limit, cursor });
        return { items: res.users.map(userJson), nextCursor: res.nextCursor };
      });
      return { users: items, next_cursor: nextCursor };
    }
    case "get": {
      const res = await partners.getUserByEmail({ email: requireOption(ctx, "email") });
      return userJson(res.user!);
    }
    case "set-kyc": {
      const res = await partnerResources.setKycStatus({
        userId: requirePositional(ctx, 1, "USER_ID"),
        status: oneOf(requireOption(ctx, "status"), KYC_STATUSES, "--status"),
        provider: (ctx.options.provider as string | undefined) ?? "",
      });
      const k = res.kyc!;
      return { user_id: k.userId, status: k.status, provider: k.provider || null, updated_at: k.updatedAt };
    }
    case "set-status": {
      const res = await partnerResources.setUserStatus({
        userId: requirePositional(ctx, 1, "USER_ID"),
        status: oneOf(requirePositional(ctx, 2, "active|inactive"), USER_STATUSES, "STATUS"),
      });
      return { user_id: res.userId, status: res.status };
    }
    case "set-email": {
      const res = await partnerResources.setUserEmail({ userId: requirePositional(ctx, 1, "USER_ID"), email: requireOption(ctx, "email") });
      return { user_id: res.userId, email: res.email, previous_email: res.previousEmail, sessions_ended: res.sessionsEnded };
    }
    case "add-wallet": {
      const res = await partnerResources.addWallet({
        userId: requirePositional(ctx, 1, "USER_ID"),
        chain: requireOption(ctx, "chain"),
        address: requireOption(ctx, "address"),
      });
      return { user_id: res.userId, wallets: res.wallets.map((w) => ({ chain: w.chain, address: w.address })) };
    }
    case "provision-us-account": {
      const a = (await partnerResources.provisionUsAccount({ userId: requirePositional(ctx, 1, "USER_ID") })).account!;
      return {
        user_id: a.userId,
        status: a.status,
        bank_name: a.bankName,
        routing_number: a.routingNumber,
        account_number: a.accountNumber,
        account_type: a.accountType,
        beneficiary_name: a.beneficiaryName,
      };
    }
    default:
      throw new UsageError(USAGE);
  }
}
