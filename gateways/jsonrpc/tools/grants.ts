import { agentTokenJson } from "../../shared/token-response.js";
import { defineTool, object, type Tool } from "./kit.js";

const TOKEN_RESPONSE = object(
  {
    access_token: { type: "string" },
    token_type: { type: "string", const: "Bearer" },
    expires_in: { type: "integer" },
    refresh_token: { type: "string" },
    scope: { type: "string" },
    jti: { type: "string" },
  },
  // refresh_token is absent when the client did not register that grant type.
  ["access_token", "token_type", "expires_in", "scope", "jti"],
);

/** The grant itself: reissue, refresh, and the kill switch. */
export const grantTools: readonly Tool[] = [
  defineTool({
    name: "agent.grant.issue",
    category: "treasury",
    scope: null,
    auth: "bearer",
    title: "Reissue Grant",
    description: "Issues a new grant that supersedes the calling one; scope can only narrow.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({ scope: { type: "string", maxLength: 1024 } }, []),
    outputSchema: TOKEN_RESPONSE,
    async call(args, ctx) {
      const res = await ctx.clients.grants.supersedeGrant({ accessToken: ctx.accessToken, scope: args.scope ?? "" }, ctx.call);
      return agentTokenJson(res.token);
    },
  }),
  defineTool({
    name: "agent.grant.refresh",
    category: "treasury",
    scope: null,
    auth: "none",
    title: "Refresh Grant",
    description:
      "Exchanges a refresh token (client authenticated) for a new grant; the old jti is superseded. A public client (registered with token_endpoint_auth_method none, or named by its metadata document URL) sends no client_secret. Optional scope narrows the new access token within what the grant was given; optional resource names the grant's vault URN or the MCP server.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object(
      {
        refresh_token: { type: "string", minLength: 1, maxLength: 512 },
        client_id: { type: "string", minLength: 1, maxLength: 512 },
        client_secret: { type: "string", minLength: 1, maxLength: 512 },
        scope: { type: "string", maxLength: 1024 },
        resource: { type: "array", maxItems: 8, items: { type: "string", minLength: 1, maxLength: 512 } },
      },
      ["refresh_token", "client_id"],
    ),
    outputSchema: TOKEN_RESPONSE,
    async call(args, ctx) {
      const res = await ctx.clients.grants.refreshGrant(
        {
          refreshToken: args.refresh_token,
          clientId: args.client_id,
          clientSecret: args.client_secret ?? "",
          scope: args.scope ?? "",
          resources: args.resource ?? [],
        },
        ctx.call,
      );
      return agentTokenJson(res.token);
    },
  }),
  defineTool({
    name: "killSwitch.all",
    category: "treasury",
    scope: null,
    auth: "bearer",
    title: "Kill Switch: Revoke All Grants",
    description:
      "Revokes every grant of the calling grant's user, this one included, and declines every payment of the user still waiting for the owner's approval (or approved and not yet repeated) and every draft budget their agents asked for (its money back to its parent vault).",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    revokes: true,
    inputSchema: object({ reason: { type: "string", maxLength: 500 } }, []),
    outputSchema: object({ revoked: { type: "integer", minimum: 0 } }, ["revoked"]),
    async call(args, ctx) {
      const res = await ctx.clients.grants.revokeAllGrants({ accessToken: ctx.accessToken, reason: args.reason ?? "" }, ctx.call);
      return { revoked: res.revoked };
    },
  }),
];
