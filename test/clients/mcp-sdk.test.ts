import { expect } from "chai";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";
import { createOwner, grantFor } from "../support/budgets.js";
import { thrownBy } from "../support/refusals.js";

/** The official MCP TypeScript SDK client against our endpoints. */
describe("MCP SDK client", () => {
  let stack: McpStack;
  const clients: Client[] = [];
  before(async () => {
    stack = await startMcpStack();
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    await stack.close();
  });

  async function connect(path: string, token?: string) {
    const client = new Client({ name: "vaultgate-test", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL(`${stack.url}${path}`), {
      requestInit: token ? { headers: { authorization: `Bearer ${token}` } } : {},
    });
    await client.connect(transport);
    clients.push(client);
    return client;
  }

  it("initializes, lists and calls tools on /mcp/treasury and /mcp/write; output is validated by the SDK against outputSchema", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner, { stepUp: true });
    const treasury = await connect("/mcp/treasury", token);
    expect(treasury.getServerVersion()?.name).to.equal("vaultgate");
    const { tools } = await treasury.listTools();
    expect(tools.map((t) => t.name)).to.include("agent.budget.create");
    const createKey = `sdk-${Date.now()}-0001`;
    const created = await treasury.callTool({
      name: "agent.budget.create",
      arguments: {
        purpose: "ap",
        display_name: "Accounts payable",
        amount_cap_cents_per_tx: 1_000,
        step_up_amount_cents: 500,
        chain_allowlist: ["base"],
        idempotency_key: createKey,
      },
    });
    const budget = created.structuredContent as { vault_id: string; agent_principal_id: string; status: string };
    expect(budget.status).to.equal("active");
    expect(created.isError).to.equal(false);

    // The same key with other arguments: a refusal the SDK accepts as an isError result
    // (no structuredContent for it to check against the outputSchema), never a throw.
    const conflict = await treasury.callTool({
      name: "agent.budget.create",
      arguments: { purpose: "trip", display_name: "Something else", chain_allowlist: ["base"], idempotency_key: createKey },
    });
    expect(conflict.isError).to.equal(true);
    expect(conflict.structuredContent).to.equal(undefined);
    const conflictError = (conflict._meta as { error: { code: number; data: Record<string, unknown> } }).error;
    expect([conflictError.code, conflictError.data.reason_id]).to.deep.equal([-32602, "idempotency_conflict"]);
    expect(JSON.parse((conflict.content as { type: string; text: string }[])[0]!.text)).to.deep.equal({ error: conflictError });

    await stack.admin.budgets.fundVault({ vaultId: budget.vault_id, amountCents: 10_000n });
    const childToken = await grantFor(stack, { userId: owner.userId, vaultId: budget.vault_id, agentPrincipalId: budget.agent_principal_id });
    const write = await connect("/mcp/write", childToken);
    await write.listTools();
    const sim = await write.callTool({
      name: "payments.simulate",
      arguments: {
        counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
        amount_cents: 700,
        currency: "USD",
        idempotency_key: "sdk-sim-0001",
      },
    });
    expect(sim.structuredContent).to.deep.equal({
      outcome: "pending_step_up",
      rule: "step_up_amount",
      broken_rules: [{ reason_id: "step_up_amount", message: "the amount needs the owner's step-up approval" }],
    });
    await write.ping();

    // A domain refusal reaches the model as a tool result with isError: the SDK does not
    // throw; the text (JSON) and _meta carry the JSON-RPC error.
    const refused = await write.callTool({
      name: "payments.initiate",
      arguments: {
        counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
        amount_cents: 1_001,
        currency: "USD",
        idempotency_key: "sdk-pay-0001",
      },
    });
    expect(refused.isError).to.equal(true);
    expect(refused.structuredContent).to.equal(undefined);
    const error = (refused._meta as { error: { code: number; message: string; data: Record<string, unknown> } }).error;
    expect([error.code, error.message, error.data.reason_id, error.data.limit]).to.deep.equal([
      -32002,
      "per_tx_cap: the amount is over the per-transaction cap",
      "policy_denied",
      "per_tx_cap",
    ]);
    expect((refused.content as { type: string; text: string }[])[0]!.text).to.match(/per_tx_cap/);
    // Authentication problems stay protocol errors the SDK throws.
    const unknownTool = await thrownBy(write.callTool({ name: "no.such.tool", arguments: {} }));
    expect(unknownTool).to.be.instanceOf(McpError);
    expect((unknownTool as McpError).code).to.equal(-32602);
  });

  it("without a bearer the SDK sees the 401", async () => {
    expect(String(await thrownBy(connect("/mcp/read")))).to.match(/401|Unauthorized/i);
  });
});
