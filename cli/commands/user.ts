import type { CommandContext } from "./types.js";
import { requireOption, UsageError } from "./types.js";

/** vaultgate user create (other user commands arrive with the partner-resources work). */
export async function userCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  const { partners } = (await ctx.admin()).clients;
  switch (sub) {
    case "create": {
      const res = await partners.createUser({ email: requireOption(ctx, "email") });
      return { user_id: res.userId, vault_id: res.vaultId, created: res.created };
    }
    default:
      throw new UsageError("user create --email E");
  }
}
