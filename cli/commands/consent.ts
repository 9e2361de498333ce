import type { CommandContext } from "./types.js";
import { listOption, requireOption, UsageError } from "./types.js";

/** vaultgate consent grant|revoke --partner CLIENT_ID --user USER_ID [--scopes a,b] */
export async function consentCommand(ctx: CommandContext) {
  const [sub] = ctx.positionals;
  if (sub !== "grant" && sub !== "revoke") throw new UsageError("consent grant|revoke --partner CLIENT_ID --user USER_ID [--scopes a,b]");
  const scopes = listOption(ctx, "scopes");
  // An empty list would revoke nothing (yet leaving --scopes out revokes all) or grant an empty consent.
  if (scopes?.length === 0) {
    const every = sub === "grant" ? "grant every consent scope" : "revoke every scope";
    throw new UsageError(`--scopes names no scope: give one or more (a,b), or leave --scopes out to ${every}`);
  }
  const { partnerResources } = (await ctx.admin()).clients;
  const req = { clientId: requireOption(ctx, "partner"), userId: requireOption(ctx, "user"), scopes: scopes === undefined ? undefined : { scopes } };
  const res = sub === "grant" ? await partnerResources.grantConsent(req) : await partnerResources.revokeConsent(req);
  return { client_id: req.clientId, user_id: req.userId, scopes: res.scopes };
}
