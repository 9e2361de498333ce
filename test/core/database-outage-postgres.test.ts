import { randomBytes } from "node:crypto";
import type { Interceptor } from "@connectrpc/connect";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createCore, type Core } from "../../core/core.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { createTestClock } from "../support/clock.js";
import { createScratchDatabase, requirePostgres } from "../support/db.js";
import { createCapturedLogger } from "../support/logs.js";
import { createOwner, grantFor } from "../support/budgets.js";
import { basic, createPartner, mintPartnerToken } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { postRpc } from "../support/mcp.js";
import type { TestStack } from "../support/stack.js";
import { startRelay } from "../support/db-relay.js";

/**
 * A database outage is a 503 with Retry-After on every surface (a JSON-RPC -32603
 * temporarily_unavailable with retry_after_seconds), never a 500 that the spec tells
 * clients to retry unchanged; core logs it once at warn, without a stack.
 */
describe("database outage (PostgreSQL)", () => {
  let core: Core;
  let gateway: FastifyInstance;
  let url: string;
  let relay: Awaited<ReturnType<typeof startRelay>>;
  let drop: () => Promise<void>;
  const logs = createCapturedLogger();
  let partner: Awaited<ReturnType<typeof createPartner>>;
  let partnerToken: string;
  let userId: string;
  let agentToken: string;

  before(async function () {
    // Embedded PGlite has no connection to lose; the outage needs a real server.
    requirePostgres(this, "the embedded database has no connection to lose");
    const scratch = (await createScratchDatabase())!;
    drop = scratch.drop;
    const dbUrl = new URL(scratch.url);
    relay = await startRelay({ host: dbUrl.hostname, port: Number(dbUrl.port || 5432) });
    dbUrl.hostname = "127.0.0.1";
    dbUrl.port = String(relay.port);
    const adminToken = randomBytes(16).toString("hex");
    const gatewayToken = randomBytes(16).toString("hex");
    const clock = createTestClock();
    const issuer = "http://vaultgate.test";
    core = await createCore({
      db: { url: dbUrl.toString(), poolMax: 4 },
      logger: logs.logger,
      adminToken,
      gatewayToken,
      issuer,
      partnerAudience: "urn:vaultgate:partner-api",
      clock,
    });
    const transport = createInProcessTransport(core.routes, core.interceptors);
    gateway = await buildGateway({
      clients: createCoreClients(transport, { gatewayToken }),
      logger: logs.logger,
      urls: { issuer, baseUrl: issuer, authUrl: issuer, appUrl: issuer, mcpUrl: issuer },
    });
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
    // Fixtures while the database is there, through the same helpers as every suite.
    const { createRouterTransport } = await import("@connectrpc/connect");
    const auth: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${adminToken}`);
      return next(req);
    };
    const admin = createCoreClients(createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } }));
    const stack = { core, clock, admin, clients: createCoreClients(transport), url, issuer, mcpUrl: issuer } as unknown as TestStack;
    partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    partnerToken = await mintPartnerToken(stack, partner);
    userId = (await createUserFor(stack, partner)).userId;
    agentToken = await grantFor(stack, await createOwner(stack));
  });

  after(async () => {
    await gateway?.close();
    await core?.close();
    await drop?.();
  });

  const expect503 = (res: Response, label: string) => {
    expect(res.status, label).to.equal(503);
    expect(res.headers.get("retry-after"), label).to.equal("5");
  };

  async function everySurface() {
    const kyc = await fetch(`${url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${partnerToken}` } });
    expect503(kyc, `partner resource ${await kyc.clone().text()}`);
    expect(((await kyc.json()) as { error: { code: string } }).error.code).to.equal("temporarily_unavailable");

    const token = await fetch(`${url}/api/partner/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(partner.clientId, partner.clientSecret) },
      body: "grant_type=client_credentials",
    });
    expect503(token, "partner token endpoint");
    expect(((await token.json()) as { error: string }).error).to.equal("temporarily_unavailable");

    const agentOauth = await fetch(`${url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=refresh_token&refresh_token=rt&client_id=c&client_secret=s",
    });
    expect503(agentOauth, "agent token endpoint");
    expect(((await agentOauth.json()) as { error: string }).error).to.equal("temporarily_unavailable");

    const page = await fetch(`${url}/dashboard/agents`, { headers: { cookie: "vg_session=some-session-token" } });
    expect503(page, "web page");
    expect(page.headers.get("content-type")).to.match(/^text\/html/);

    const rpc = await postRpc(`${url}/mcp/read`, { jsonrpc: "2.0", id: 1, method: "accounts.balance", params: {} }, { authorization: `Bearer ${agentToken}` });
    expect(rpc.json!.error.code, rpc.text).to.equal(-32603);
    expect(rpc.json!.error.data.reason_id).to.equal("temporarily_unavailable");
    expect(rpc.json!.error.data.retry_after_seconds).to.equal(5);
  }

  it("connections dropped and refused: 503 + Retry-After everywhere, logged at warn without a stack; service resumes", async () => {
    // Control: the same calls succeed while the database is there.
    const before = await fetch(`${url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${partnerToken}` } });
    expect(before.status).to.equal(200);

    await relay.cut();
    const mark = logs.lines.length;
    try {
      await everySurface();
    } finally {
      await relay.restore();
    }
    const lines = logs.lines.slice(mark).map((l) => JSON.parse(l) as { msg: string; level: number });
    const outage = lines.filter((l) => l.msg === "rpc unavailable: database unreachable");
    expect(outage.length).to.be.at.least(5);
    for (const l of outage) {
      expect(l.level).to.equal(40); // warn
      expect(JSON.stringify(l)).to.not.match(/\n\s+at /); // no stack
    }
    // Neither core's error path nor any gateway treats the outage as a bug (a service's own
    // best-effort side writes may still log that they failed).
    const bugLines = ["rpc error", "oauth endpoint failure", "partner resource failure", "page failure", "token endpoint failure", "json-rpc gateway failure"];
    expect(lines.filter((l) => bugLines.includes(l.msg)).map((l) => l.msg)).to.deep.equal([]);

    const after = await fetch(`${url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${partnerToken}` } });
    expect(after.status).to.equal(200);
  });

  it("its connections terminated by the server (pg_terminate_backend) while it stays down: 503, not 500", async () => {
    // Warm the pool, then have the server end every one of core's sessions (57P01) and
    // stop accepting new ones through the relay.
    expect((await fetch(`${url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${partnerToken}` } })).status).to.equal(200);
    const dbName = (await core.db.raw("SELECT current_database() AS d")).rows[0].d as string;
    const knexFactory = (await import("knex")).default;
    const other = knexFactory({ client: "pg", connection: process.env.TEST_DATABASE_URL, pool: { min: 0, max: 1 } });
    try {
      await other.raw("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ? AND pid <> pg_backend_pid()", [dbName]);
    } finally {
      await other.destroy();
    }
    await relay.cut();
    try {
      await everySurface();
    } finally {
      await relay.restore();
    }
  });
});
