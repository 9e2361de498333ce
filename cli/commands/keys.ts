import type { CommandContext } from "./types.js";
import { UsageError, requirePositional } from "./types.js";

/** vaultgate keys rotate | vaultgate keys retire KID (docs/keys.md) */
export async function keysCommand(ctx: CommandContext) {
  const sub = ctx.positionals[0];
  if (sub === "rotate") {
    const res = await (await ctx.admin()).clients.grants.rotateSigningKey({});
    return { kid: res.kid, published_kids: res.publishedKids };
  }
  if (sub === "retire") {
    const kid = requirePositional(ctx, 1, "KID");
    const res = await (await ctx.admin()).clients.grants.retireSigningKey({ kid });
    return { retired_kid: res.kid, published_kids: res.publishedKids };
  }
  throw new UsageError("keys rotate | keys retire KID");
}
