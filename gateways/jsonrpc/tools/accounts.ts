import { AMOUNT, defineTool, object, UUID, type Tool } from "./kit.js";

/** What the grant's vault holds. */
export const accountTools: readonly Tool[] = [
  defineTool({
    name: "accounts.balance",
    category: "read",
    scope: "accounts:read",
    auth: "bearer",
    title: "Vault Balance",
    description: "The balance of the grant's vault.",
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({}, []),
    outputSchema: object({ vault_id: UUID, balance_cents: AMOUNT, currency: { type: "string" } }, ["vault_id", "balance_cents", "currency"]),
    async call(_args, ctx) {
      const res = await ctx.clients.budgets.getBalance({ accessToken: ctx.accessToken }, ctx.call);
      return { vault_id: res.vaultId, balance_cents: Number(res.balanceCents), currency: res.currency };
    },
  }),
];
