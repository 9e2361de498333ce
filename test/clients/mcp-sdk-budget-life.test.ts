import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";
import { ALL_AGENT_SCOPES, createOwner, grantFor, ownerSession } from "../support/budgets.js";
import { balanceOf, expectLedgerBalanced } from "../support/budget-life.js";
import { expectRefused, expectToolError, thrownBy } from "../support/refusals.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * A budget's whole life with the official MCP SDK client as the agent: create, fund, pay
 * from it under its policy, then the owner closes it on the dashboard's RPC (a real signed-in,
 * stepped-up session). The books are proven after every step.
 */
describe("MCP SDK client: a budget's life (create, fund, pay, close)", () => {
  let stack: McpStack;
  const clients: Client[] = [];
  before(async () => {
    stack = await startMcpStack();
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await stack.close();
  });

  async function connect(path: string, token: string) {
    const client = new Client({ name: "vaultgate-budget-life", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}${path}`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
    clients.push(client);
    return client;
  }
  const pay = (client: Client, amount: number) =>
    client.callTool({
      name: "payments.initiate",
      arguments: {
        counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
        amount_cents: amount,
        currency: "USD",
        idempotency_key: `sdk-${randomUUID()}`,
      },
    });

  it("the agent funds its budget and pays from it; the owner closes it and the money goes back; nothing more is paid", async () => {
    const owner = await createOwner(stack);
    await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: 10_000n });
    const treasury = await connect("/mcp/treasury", await grantFor(stack, owner, { stepUp: true }));
    const { tools } = await treasury.listTools();
    expect(tools.map((t) => t.name)).to.include.members(["agent.budget.create", "agent.budget.fund", "agent.budget.revoke"]);

    const created = await treasury.callTool({
      name: "agent.budget.create",
      arguments: {
        purpose: "trip",
        display_name: "Conference trip",
        amount_cap_cents_per_tx: 2_000,
        chain_allowlist: ["base"],
        idempotency_key: `sdk-${randomUUID()}`,
      },
    });
    const budget = created.structuredContent as { vault_id: string; agent_principal_id: string; status: string };
    expect(budget.status).to.equal("active");

    // The SDK validates every result against the tool's published outputSchema.
    const funded = await treasury.callTool({
      name: "agent.budget.fund",
      arguments: { vault_id: budget.vault_id, amount_cents: 5_000, idempotency_key: `sdk-${randomUUID()}` },
    });
    expect(funded.isError).to.equal(false);
    expect(funded.structuredContent).to.deep.include({ vault_id: budget.vault_id, parent_vault_id: owner.vaultId, balance_cents: 5_000, replayed: false });
    const beyond = await treasury.callTool({
      name: "agent.budget.fund",
      arguments: { vault_id: budget.vault_id, amount_cents: 5_001, idempotency_key: `sdk-${randomUUID()}` },
    });
    expectToolError(beyond, -32003, "insufficient_funds");
    await expectLedgerBalanced(stack);

    // The budget's own agent (a grant the operator issues on the budget vault) pays under its policy.
    const agentToken = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: budget.vault_id, scopes: ALL_AGENT_SCOPES })).token!.accessToken;
    const write = await connect("/mcp/write", agentToken);
    expect((await pay(write, 1_500)).structuredContent).to.deep.include({ kind: "accepted", status: "completed" });
    expectToolError(await pay(write, 2_001), -32002, "policy_denied", "per_tx_cap");
    expect(await balanceOf(stack, budget.vault_id)).to.equal(3_500);
    await expectLedgerBalanced(stack);

    // The owner closes it from the dashboard: a signed-in session with a fresh step-up.
    const sessionToken = await ownerSession(stack, owner.userId, { stepUp: true });
    const closed = await stack.clients.budgets.closeBudget({ sessionToken, vaultId: budget.vault_id });
    expect([closed.sweptCents, closed.revokedGrants, closed.alreadyClosed]).to.deep.equal([3_500n, 1, false]);
    expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, budget.vault_id)]).to.deep.equal([8_500, 0]);
    await expectLedgerBalanced(stack);

    // The agent's grant is gone: the SDK meets the 401 and its -32001 body.
    expect(String(await thrownBy(pay(write, 100)))).to.match(/-32001.*the grant has been revoked.*invalid_token/);
    // No grant is issued on the closed vault; one that exists anyway (written directly) meets a frozen policy.
    await expectRefused(
      stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: budget.vault_id, scopes: ALL_AGENT_SCOPES }),
      Reason.INVALID_TARGET,
      /the vault belongs to a closed budget/,
    );
    const laterToken = await grantFor(stack, { userId: owner.userId, vaultId: budget.vault_id, agentPrincipalId: budget.agent_principal_id });
    const later = await connect("/mcp/write", laterToken);
    expectToolError(await pay(later, 100), -32002, "policy_denied", "policy_inactive");
    // Nothing more goes in; revoking again changes nothing.
    expectToolError(
      await treasury.callTool({
        name: "agent.budget.fund",
        arguments: { vault_id: budget.vault_id, amount_cents: 100, idempotency_key: `sdk-${randomUUID()}` },
      }),
      -32002,
      "access_denied",
    );
    const again = await treasury.callTool({ name: "agent.budget.revoke", arguments: { vault_id: budget.vault_id } });
    expect(again.structuredContent).to.deep.include({ status: "closed", already_closed: true, swept_cents: 0, transfer_id: null, revoked_grants: 0 });
    expect(await balanceOf(stack, owner.vaultId)).to.equal(8_500);
    await expectLedgerBalanced(stack);
  });
});
