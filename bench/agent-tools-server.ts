/**
 * Child process of agent-tools.bench.ts, so the load generator never shares an event loop
 * with a server under test. `ours <postgres-url> <log-file>` or `peer <postgres-url>`;
 * prints one JSON line for the parent, then serves until SIGTERM.
 */
import { createServer } from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { AGENT_SCOPES } from "../lib/vocabulary.js";

const [role, databaseUrl, logFile] = process.argv.slice(2);
const stoppers: (() => Promise<void>)[] = [];
process.once("SIGTERM", async () => {
  for (const stop of stoppers) await stop().catch(() => undefined);
  process.exit(0);
});

if (role === "peer" && databaseUrl) {
  // The same durable duty as ours: the tool commits one audit row (its own statement, a
  // pool as large as ours) on the same cluster before it answers.
  const { default: pg } = await import("pg");
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
  stoppers.push(() => pool.end());
  await pool.query(
    `CREATE TABLE IF NOT EXISTS peer_audit (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, request_id text NOT NULL, tool text NOT NULL, outcome text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
  );
  const { randomUUID } = await import("node:crypto");
  // The SDK's documented stateless pattern: a fresh server and transport per request, JSON responses.
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const mcp = new McpServer({ name: "peer", version: "1.0.0" });
      mcp.registerTool("echo", { description: "echo", inputSchema: {} }, async () => {
        await pool.query(`INSERT INTO peer_audit (request_id, tool, outcome) VALUES ($1, 'echo', 'success')`, [randomUUID()]);
        return { content: [{ type: "text", text: "hi" }] };
      });
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
} else if (role === "ours" && databaseUrl && logFile) {
  // Production shape: `vaultgate serve --role all` (real config, the production logger at
  // info through the service's buffered destination, to a file instead of stdout),
  // fixtures through the operator's gRPC API like the CLI.
  const { loadConfig } = await import("../cli/config.js");
  const { serve } = await import("../cli/serve.js");
  const { createLogger, logDestination } = await import("../cli/logger.js");
  const { createCoreClients } = await import("../gateways/core-clients.js");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const { mkdtemp, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { randomBytes } = await import("node:crypto");
  const { fundedAgentBudget } = await import("./support.js");
  const dataDir = await mkdtemp(join(tmpdir(), "vaultgate-bench-tools-"));
  const adminToken = randomBytes(16).toString("hex");
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    DATA_DIR: dataDir,
    PORT: "0",
    CORE_PORT: "0",
    ADMIN_TOKEN: adminToken,
    PROVISIONING_RATE_LIMIT_PER_MINUTE: "1000000",
  });
  const running = await serve(config, "all", createLogger("info", logDestination(logFile)));
  stoppers.push(
    () => running.close(),
    () => rm(dataDir, { recursive: true, force: true }),
  );
  const admin = createCoreClients(
    createGrpcTransport({
      baseUrl: running.coreUrl!,
      interceptors: [
        (next) => (req) => {
          req.header.set("authorization", `Bearer ${adminToken}`);
          return next(req);
        },
      ],
    }),
  );
  const { parentToken: parent, agentToken: child } = await fundedAgentBudget(admin, running.gatewayUrl!, {
    scopes: [...AGENT_SCOPES],
    caps: { amount_cap_cents_per_tx: 100_000 },
    fundCents: 1_000_000n,
  });
  console.log(JSON.stringify({ url: running.gatewayUrl, parentToken: parent, childToken: child, kind: "real grant token" }));
} else {
  console.error("usage: agent-tools-server.ts ours <postgres-url> <log-file> | peer <postgres-url>");
  process.exit(2);
}
