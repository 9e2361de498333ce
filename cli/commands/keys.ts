import type { CommandContext } from "./types.js";
import { UsageError } from "./types.js";

/** vaultgate keys rotate */
export async function keysCommand(ctx: CommandContext) {
  if (ctx.positionals[0] !== "rotate") throw new UsageError("keys rotate");
  const res = await (await ctx.admin()).clients.grants.rotateSigningKey({});
  return { kid: res.kid, published_kids: res.publishedKids };
}
