import type { CommandContext } from "./types.js";

/** `vaultgate dev chain` and `vaultgate dev outbox`: one command word, two helpers loaded on use. */
export async function devCommand(ctx: CommandContext): Promise<unknown> {
  if (ctx.positionals[0] === "chain") return (await import("./dev-chain.js")).devChainCommand(ctx);
  return (await import("./grant.js")).devCommand(ctx);
}
