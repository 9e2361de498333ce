/**
 * Issue 6: `payments.simulate` through `/mcp/write` at 50 connections (bearer verified,
 * grant and vault read from Postgres on every call) next to a stateless
 * `@modelcontextprotocol/sdk` server answering a trivial tool, in the same run (target:
 * at least 2.0x its req/s); and `agent.budget.create` p50/p99.
 */
import { createServer, type Server } from "node:http";
import { performance } from "node:perf_hooks";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { benchPostgres, fmt, load, median, percentile, table } from "./support.js";

const CONNECTIONS = 50;

export async function run(): Promise<void> {
  // The MCP test stack runs on the database TEST_DATABASE_URL names: point it at the bench server.
  process.env.TEST_DATABASE_URL = await benchPostgres();
  const { startMcpStack } = await import("../test/support/mcp.js");
  const { createOwner, grantFor } = await import("../test/support/budgets.js");
  const { closeTestDatabase } = await import("../test/support/db.js");
  const stack = await startMcpStack({ provisioningLimitPerMinute: 1_000_000 });
  const peer = await startPeer();
  try {
    const owner = await createOwner(stack);
    const { token, kind } = await bearer(stack, owner, true);
    const created = await fetch(`${stack.url}/mcp/treasury`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "agent.budget.create",
        params: { purpose: "custom", display_name: "bench", amount_cap_cents_per_tx: 100_000, chain_allowlist: ["base"], idempotency_key: "bench-budget-0001" },
      }),
    });
    const budget = ((await created.json()) as { result: { vault_id: string; agent_principal_id: string } }).result;
    await stack.admin.budgets.fundVault({ vaultId: budget.vault_id, amountCents: 1_000_000n });
    const child = await bearer(stack, { userId: owner.userId, vaultId: budget.vault_id, agentPrincipalId: budget.agent_principal_id }, false);

    const simulate = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name: "payments.simulate", arguments: { counterparty: { address: "0xabc", chain: "base", token: "USDC" }, amount_cents: 100, currency: "USD", idempotency_key: "bench-sim-0001" } },
    });
    const ours = { url: `${stack.url}/mcp/write`, method: "POST" as const, connections: CONNECTIONS, body: simulate, headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${child.token}` } };
    const trivial = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: { text: "hi" } } });
    const theirs = { url: `${peer.url}/mcp`, method: "POST" as const, connections: CONNECTIONS, body: trivial, headers: { "content-type": "application/json", accept: "application/json, text/event-stream" } };

    await load({ ...ours, duration: 2 });
    await load({ ...theirs, duration: 2 });
    const a = await load(ours);
    const b = await load(theirs);
    table([
      { measure: `payments.simulate via /mcp/write, ${CONNECTIONS} conns (auth: ${kind})`, "req/s": fmt(a.rps), "p50 ms": a.p50, "p99 ms": a.p99, non2xx: a.non2xx, errors: a.errors },
      { measure: `MCP SDK stateless server, trivial tool, ${CONNECTIONS} conns`, "req/s": fmt(b.rps), "p50 ms": b.p50, "p99 ms": b.p99, non2xx: b.non2xx, errors: b.errors },
    ]);
    console.log(`ratio: ${fmt(a.rps / b.rps, 2)}x the SDK server's req/s (target >= 2.0x)`);

    // agent.budget.create: sequential provisioning sagas on one parent vault.
    const latencies: number[] = [];
    for (let i = 0; i < 200; i++) {
      const t = performance.now();
      const res = await fetch(`${stack.url}/mcp/treasury`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: i,
          method: "agent.budget.create",
          params: { purpose: "trip", display_name: `bench ${i}`, chain_allowlist: ["base", "eth"], idempotency_key: `bench-create-${i.toString().padStart(6, "0")}` },
        }),
      });
      const body = (await res.json()) as { error?: unknown };
      if (body.error) throw new Error(`agent.budget.create failed: ${JSON.stringify(body.error)}`);
      latencies.push(performance.now() - t);
    }
    table([{ measure: "agent.budget.create (3-step saga), sequential", n: latencies.length, "p50 ms": fmt(median(latencies), 2), "p99 ms": fmt(percentile(latencies, 99), 2) }]);
  } finally {
    await new Promise<void>((r) => peer.server.close(() => r()));
    await stack.close();
    await closeTestDatabase();
  }
}

/**
 * A real grant token when the grants service can mint one (issue 5); until then a
 * stand-in bearer, so the numbers then exclude JWT verification and the grant read.
 */
async function bearer(
  stack: Awaited<ReturnType<typeof import("../test/support/mcp.js").startMcpStack>>,
  owner: { userId: string; vaultId: string; agentPrincipalId: string },
  stepUp: boolean,
): Promise<{ token: string; kind: string }> {
  const { grantFor, ALL_AGENT_SCOPES } = await import("../test/support/budgets.js");
  try {
    const res = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ALL_AGENT_SCOPES, stepUp });
    return { token: res.token!.accessToken, kind: "real grant token" };
  } catch (err) {
    if (ConnectError.from(err).code !== Code.Unimplemented) throw err;
    return { token: stack.bearerFor(grantFor(stack, owner, { stepUp })), kind: "stand-in bearer, issue 5 pending" };
  }
}

/** The SDK's documented stateless pattern: a fresh server and transport per request, JSON responses. */
async function startPeer(): Promise<{ server: Server; url: string }> {
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
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
}
