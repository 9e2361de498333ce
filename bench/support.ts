/**
 * What every bench shares, so each measures the same way (docs/benchmarks.md): the shipped
 * logger, durable PostgreSQL, a separate load generator checking every response, alternating
 * rounds judged on the median ratio, and a recorded verdict per target.
 */
import { randomBytes } from "node:crypto";
import type { CoreClients } from "../gateways/core-clients.js";

export * from "./basics.js";
export * from "./bench-postgres.js";
export * from "./compare.js";
export * from "./load.js";
export * from "./machine-watch.js";
export * from "./processes.js";
export type { Load } from "./machine-load.js";

/**
 * An agent budget made as an agent makes one, funded by the operator, with a grant on its vault.
 * `user` owns the parent vault (a fresh user when left out).
 */
export async function fundedAgentBudget(
  admin: CoreClients,
  gatewayUrl: string,
  o: { scopes: string[]; caps: Record<string, number>; fundCents: bigint; user?: { userId: string; vaultId: string } },
) {
  const user = o.user ?? (await admin.partners.createUser({ email: `bench-${randomBytes(6).toString("hex")}@example.test` }));
  const parentToken = (await admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: o.scopes, stepUp: true })).token!.accessToken;
  const res = await fetch(`${gatewayUrl}/mcp/treasury`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${parentToken}` },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "agent.budget.create",
      params: { purpose: "custom", display_name: "bench", ...o.caps, chain_allowlist: ["base"], idempotency_key: "bench-budget-0001" },
    }),
  });
  const body = (await res.json()) as { result?: { vault_id: string } };
  if (!body.result) throw new Error(`agent.budget.create failed: ${JSON.stringify(body)}`);
  const vaultId = body.result.vault_id;
  await admin.budgets.fundVault({ vaultId, amountCents: o.fundCents });
  const agentToken = (await admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: o.scopes, stepUp: false })).token!.accessToken;
  return { parentToken, agentToken, vaultId };
}
