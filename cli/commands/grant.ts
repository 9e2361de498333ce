import type { CommandContext } from "./types.js";
import { agentTokenJson } from "../../gateways/shared/token-response.js";
import { listOption, requireOption, UsageError } from "./types.js";

/** vaultgate grant issue --user U --vault V --scopes a,b [--client C] [--step-up] -> the agent token response. */
export async function grantCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  if (sub !== "issue") throw new UsageError("grant issue --user USER_ID --vault VAULT_ID --scopes a,b [--client CLIENT_ID] [--step-up]");
  const scopes = listOption(ctx, "scopes");
  if (!scopes || scopes.length === 0) throw new UsageError("--scopes is required (comma-separated)");
  const { grants } = (await ctx.admin()).clients;
  const { token } = await grants.issueGrant({
    userId: requireOption(ctx, "user"),
    vaultId: requireOption(ctx, "vault"),
    scopes,
    clientId: typeof ctx.options.client === "string" ? ctx.options.client : "",
    stepUp: ctx.options["step-up"] === true,
  });
  return agentTokenJson(token);
}

/** vaultgate dev outbox [--email E]: the e-mails the embedded default delivered (one-time codes). */
export async function devCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  if (sub !== "outbox") throw new UsageError("dev outbox [--email E]");
  const { grants } = (await ctx.admin()).clients;
  const email = typeof ctx.options.email === "string" ? ctx.options.email : "";
  const { messages } = await grants.listOutbox({ email });
  return { messages: messages.map((m) => ({ email: m.email, subject: m.subject, body: m.body, created_at: m.createdAt })) };
}
