import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { createCore, type Core } from "../../../core/core.js";
import { createInProcessTransport } from "../../../core/in-process-transport.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { createTestClock } from "../../support/clock.js";
import { createScratchDatabase, requirePostgres } from "../../support/db.js";
import { createCapturedLogger } from "../../support/logs.js";
import { startRelay } from "../../support/db-relay.js";
import { createJar, createUser, formFields, pkce, registerClient, signIn } from "../../support/agent-oauth.js";
import type { TestStack } from "../../support/stack.js";

const ATTACKER = "https://attacker.example/callback";
const REDIRECT = "http://127.0.0.1:9/callback";

/**
 * The pages while the database is unreachable: authorize cannot verify a client, so it
 * answers a page (never a redirect to the request's redirect_uri), and sign-out cannot
 * end the session, so it says so (the cookie is cleared all the same).
 */
describe("authorize and sign-out during a database outage (PostgreSQL)", function () {
  this.timeout(60_000);
  let core: Core;
  let gateway: FastifyInstance;
  let stack: TestStack;
  let relay: Awaited<ReturnType<typeof startRelay>>;
  let drop: () => Promise<void>;

  before(async function () {
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
    const logs = createCapturedLogger();
    core = await createCore({
      db: { url: dbUrl.toString(), poolMax: 8 },
      logger: logs.logger,
      adminToken,
      gatewayToken,
      issuer,
      partnerAudience: "urn:vaultgate:partner-api",
      clock,
      registrationLimitPerMinute: 1_000_000,
    });
    const transport = createInProcessTransport(core.routes, core.interceptors);
    gateway = await buildGateway({
      clients: createCoreClients(transport, { gatewayToken }),
      logger: logs.logger,
      urls: { issuer, baseUrl: issuer, authUrl: issuer, appUrl: issuer, mcpUrl: issuer },
    });
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    const url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
    const auth: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${adminToken}`);
      return next(req);
    };
    const admin = createCoreClients(createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } }));
    stack = { core, clock, admin, clients: createCoreClients(transport), url, issuer, mcpUrl: issuer, logs } as unknown as TestStack;
  });
  after(async () => {
    await gateway?.close();
    await core?.close();
    await drop?.();
  });

  const query = (clientId: string, redirectUri: string) =>
    new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: redirectUri,
      code_challenge: pkce().challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      state: "st",
    });

  it("authorize, many at once with the database cut: 503 pages with Retry-After, none redirects to the redirect_uri", async () => {
    // Registered while the database is there, but never looked up by authorize (not cached).
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT] })).body;
    await relay.cut();
    let answers: Response[];
    try {
      answers = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          fetch(`${stack.url}/oauth2/authorize?${query(i % 2 ? client.client_id : `agc_${randomBytes(12).toString("hex")}`, i % 3 ? ATTACKER : REDIRECT)}`, {
            redirect: "manual",
          }),
        ),
      );
    } finally {
      await relay.restore();
    }
    for (const res of answers) {
      expect(res.headers.get("location")).to.equal(null);
      expect(res.status).to.equal(503);
      expect(res.headers.get("retry-after")).to.equal("5");
      expect(res.headers.get("content-type")).to.match(/^text\/html/);
    }
    // Back up, the verified client's errors go back to it again.
    const q = query(client.client_id, REDIRECT);
    q.set("scope", "nope");
    const back = await fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual" });
    expect(back.status).to.equal(303);
    expect(new URL(back.headers.get("location")!).searchParams.get("error")).to.equal("invalid_scope");
  });

  it("sign-out with the database cut: a 503 page that says so, Retry-After, the cookie kept; trying again once it is back ends the session", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const token = jar.cookies.get("vg_session")!;
    const form = formFields(await (await jar.get("/dashboard/agents")).text(), "/signout");
    await relay.cut();
    let out: Response;
    try {
      out = await jar.post("/signout", form);
    } finally {
      await relay.restore();
    }
    expect(out.status).to.equal(503);
    expect(out.headers.get("retry-after")).to.equal("5");
    expect(out.headers.get("location")).to.equal(null);
    expect(await out.text()).to.include("Sign-out did not complete");
    expect(jar.cookies.get("vg_session")).to.equal(token);
    const still = await fetch(`${stack.url}/dashboard/agents`, { headers: { cookie: `vg_session=${token}` }, redirect: "manual" });
    expect(still.status).to.equal(200);
    const again = await jar.post("/signout", form);
    expect(again.status).to.equal(303);
    expect(jar.cookies.has("vg_session")).to.equal(false);
    const ended = await fetch(`${stack.url}/dashboard/agents`, { headers: { cookie: `vg_session=${token}` }, redirect: "manual" });
    expect(ended.status).to.not.equal(200);
  });
});
