/**
 * Child process of agent-tools.bench.ts, so the load generator never shares an event
 * loop with a server under test:
 *   tsx bench/agent-tools-server.ts ours <postgres-url>   our gateway + core (one process, as `serve --role all`)
 *   tsx bench/agent-tools-server.ts peer                  the MCP SDK's stateless server, trivial tool
 * Prints one JSON line with what the parent needs, then serves until SIGTERM.
 */
import { createServer } from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { Code, ConnectError } from "@connectrpc/connect";

const [role, databaseUrl] = process.argv.slice(2);
const stoppers: (() => Promise<void>)[] = [];
process.once("SIGTERM", async () => {
  for (const stop of stoppers) await stop().catch(() => undefined);
  process.exit(0);
});

if (role === "peer") {
  // The SDK's documented stateless pattern: a fresh server and transport per request, JSON responses.
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const mcp = new McpServer({ name: "peer", version: "1.0.0" });
      mcp.registerTool("echo", { description: "echo", inputSchema: {} }, async () => ({ content: [{ type: "text", text: "hi" }] }));
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on("close", () => {
        void transport.close();
        void mcp.close();
      });
      await mcp.connect(transport);
      await transport.handleRequest(req, res, JSON.parse(Buffer.concat(chunks).toString("utf8")));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}` }));
} else if (role === "ours" && databaseUrl) {
  // The MCP test stack runs on the database TEST_DATABASE_URL names.
  process.env.TEST_DATABASE_URL = databaseUrl;
  const { startMcpStack } = await import("../test/support/mcp.js");
  const { createOwner, grantFor, ALL_AGENT_SCOPES } = await import("../test/support/budgets.js");
  const { closeTestDatabase } = await import("../test/support/db.js");
  const stack = await startMcpStack({ provisioningLimitPerMinute: 1_000_000 });
  stoppers.push(() => stack.close(), closeTestDatabase);

  /** A real grant token once issue 5 mints them; until then a stand-in bearer. */
  const bearer = async (owner: { userId: string; vaultId: string; agentPrincipalId: string }, stepUp: boolean) => {
    try {
      const res = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ALL_AGENT_SCOPES, stepUp });
      return { token: res.token!.accessToken, kind: "real grant token" };
    } catch (err) {
      if (ConnectError.from(err).code !== Code.Unimplemented) throw err;
      return { token: stack.bearerFor(grantFor(stack, owner, { stepUp })), kind: "stand-in bearer: issue 5 pending" };
    }
  };
  const owner = await createOwner(stack);
  const parent = await bearer(owner, true);
  const res = await fetch(`${stack.url}/mcp/treasury`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${parent.token}` },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "agent.budget.create",
      params: { purpose: "custom", display_name: "bench", amount_cap_cents_per_tx: 100_000, chain_allowlist: ["base"], idempotency_key: "bench-budget-0001" },
    }),
  });
  const budget = ((await res.json()) as { result: { vault_id: string; agent_principal_id: string } }).result;
  await stack.admin.budgets.fundVault({ vaultId: budget.vault_id, amountCents: 1_000_000n });
  const child = await bearer({ userId: owner.userId, vaultId: budget.vault_id, agentPrincipalId: budget.agent_principal_id }, false);
  console.log(JSON.stringify({ url: stack.url, parentToken: parent.token, childToken: child.token, kind: child.kind }));
} else {
  console.error("usage: agent-tools-server.ts ours <postgres-url> | peer");
  process.exit(2);
}
