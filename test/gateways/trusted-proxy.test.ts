import { randomInt } from "node:crypto";
import { request } from "node:http";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import type { TrustProxy } from "../../gateways/shared/client-address.js";
import { requireNginx, startNginx, type NginxProxy } from "../support/nginx.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createPartner } from "../support/partners.js";

const LIMIT = 5;
const REGISTRATION = JSON.stringify({ client_name: "Proxy test agent", redirect_uris: ["http://127.0.0.1:9/callback"], scope: "accounts:read" });

/** A loopback address of its own per run, so counts left in a reused database never meet. */
const loopback = () => `127.${randomInt(1, 255)}.${randomInt(1, 255)}.${randomInt(2, 255)}`;

interface Registered {
  status: number;
  clientId?: string;
}

/** POST /oauth2/register from `from` (a loopback source address) to `base`. */
function register(base: string, from: string, headers: Record<string, string> = {}): Promise<Registered> {
  const url = new URL(`${base}/oauth2/register`);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: "POST",
        localAddress: from,
        agent: false,
        headers: { "content-type": "application/json", ...headers },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => {
          const body = res.statusCode === 201 ? (JSON.parse(text) as { client_id: string }) : undefined;
          resolve({ status: res.statusCode!, clientId: body?.client_id });
        });
      },
    );
    req.on("error", reject);
    req.end(REGISTRATION);
  });
}

/** POST the partner token endpoint from `from` with these client credentials; resolves the status. */
function mintFrom(base: string, from: string, clientId: string, secret: string): Promise<number> {
  const url = new URL(`${base}/api/partner/oauth/token`);
  const body = new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: secret }).toString();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: "POST",
        localAddress: from,
        agent: false,
        headers: { "content-type": "application/x-www-form-urlencoded" },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode!));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * TRUST_PROXY behind a real nginx: clients are told apart by the forwarded address (limits and
 * audit), and forwarding headers from an untrusted peer are ignored.
 */
describe("trusted proxies (nginx in front of the gateway)", () => {
  let stack: TestStack;
  let nginx: NginxProxy;
  const gateways: FastifyInstance[] = [];
  let byCidr: string;
  let byHops: string;
  let untrusting: string;
  let viaXff: string;
  let viaForwarded: string;
  let viaNothing: string;
  // The proxy connects from an address of its own, so its count is this run's alone.
  const proxyAddress = loopback();

  async function gateway(trustProxy: TrustProxy | undefined): Promise<string> {
    const transport = createInProcessTransport(stack.core.routes, stack.core.interceptors);
    const issuer = stack.issuer;
    const app = await buildGateway({
      clients: createCoreClients(transport, { gatewayToken: stack.gatewayToken }),
      logger: stack.logs.logger,
      urls: { issuer, baseUrl: issuer, authUrl: issuer, appUrl: issuer, mcpUrl: issuer },
      trustProxy,
    });
    gateways.push(app);
    await app.listen({ port: 0, host: "127.0.0.1" });
    return `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  }

  before(async function () {
    requireNginx(this);
    // The secret-hashing queue must not shed these bursts on a busy machine: only the
    // per-address count is under test.
    stack = await startStack({ registrationLimitPerMinute: LIMIT, secretChecks: { maxQueue: 1000, maxWaitMs: 600_000 } });
    byCidr = await gateway([`${proxyAddress}/32`, "::1"]);
    byHops = await gateway(1);
    untrusting = await gateway(undefined);
    nginx = await startNginx([
      // The usual setup: append the peer to X-Forwarded-For, drop a client's Forwarded.
      { upstream: byCidr, bind: proxyAddress, headers: { "X-Forwarded-For": "$proxy_add_x_forwarded_for", Forwarded: "" } },
      // RFC 7239: append `for=<peer>` to Forwarded, drop a client's X-Forwarded-For.
      {
        upstream: byHops,
        bind: proxyAddress,
        http: 'map $http_forwarded $vg_forwarded { "" "for=$remote_addr"; default "$http_forwarded, for=$remote_addr"; }',
        headers: { Forwarded: "$vg_forwarded", "X-Forwarded-For": "" },
      },
      // A proxy in front of a gateway that trusts none.
      { upstream: untrusting, bind: proxyAddress, headers: { "X-Forwarded-For": "$proxy_add_x_forwarded_for" } },
    ]);
    [viaXff, viaForwarded, viaNothing] = nginx.urls as [string, string, string];
  });
  after(async () => {
    await nginx?.close();
    for (const g of gateways) await g.close();
    await stack?.close();
  });

  const auditedAddress = async (clientId: string) => {
    const row = await stack.core.db("audit_records").where({ action: "oauth.client.register", subject: clientId }).first<{ client_address: string }>();
    return row?.client_address;
  };

  /** Fires `n` registrations from each address at once; returns each address's answers. */
  async function burst(base: string, froms: string[], n: number, headersOf: (from: string, i: number) => Record<string, string> = () => ({})) {
    const answers = await Promise.all(
      froms.flatMap((from) => Array.from({ length: n }, (_, i) => register(base, from, headersOf(from, i)).then((r) => ({ from, r })))),
    );
    return new Map(froms.map((from) => [from, answers.filter((a) => a.from === from).map((a) => a.r)]));
  }

  /** Exactly LIMIT of an address's attempts get past its count; the rest are refused 429. */
  function expectLimited(from: string, answers: Registered[]) {
    const statuses = answers.map((r) => r.status).sort();
    expect(statuses, `${from}: exactly the limit passes, the rest is refused`).to.deep.equal([
      ...Array(LIMIT).fill(201),
      ...Array(answers.length - LIMIT).fill(429),
    ]);
  }

  async function expectCountedApart(base: string, headersOf?: (from: string, i: number) => Record<string, string>) {
    const a = loopback();
    const b = loopback();
    const answers = await burst(base, [a, b], 2 * LIMIT, headersOf);
    for (const from of [a, b]) {
      const mine = answers.get(from)!;
      expectLimited(from, mine);
      for (const r of mine.filter((x) => x.status === 201)) expect(await auditedAddress(r.clientId!), "the audit record names the real client").to.equal(from);
    }
  }

  it("X-Forwarded-For from a proxy in TRUST_PROXY's CIDRs: two clients behind it are counted and audited apart (concurrent)", async () => {
    await expectCountedApart(viaXff);
  });

  it("RFC 7239 Forwarded with a hop count of 1: the same, through the header nginx appends", async () => {
    await expectCountedApart(viaForwarded);
  });

  it("a client behind the trusted proxy cannot pick another address by forging the headers it sends", async () => {
    const victim = loopback();
    // Each forger claims the victim's address (and fresh ones) in both headers; the proxy
    // appends the real peer (X-Forwarded-For) or drops the forged header.
    await expectCountedApart(viaXff, (_from, i) => ({ "x-forwarded-for": i % 2 ? victim : `${loopback()}, ${victim}`, forwarded: `for=${victim}` }));
    await expectCountedApart(viaForwarded, (_from, i) => ({
      forwarded: i % 2 ? `for=${victim}` : `for=${loopback()}, for="${victim}"`,
      "x-forwarded-for": victim,
    }));
    const victimRegisters = await register(viaXff, victim);
    expect(victimRegisters.status, "the victim's own count was never touched").to.equal(201);
    expect(await auditedAddress(victimRegisters.clientId!)).to.equal(victim);
  });

  it("TRUST_PROXY off: forwarded headers sent straight to the gateway are ignored; the TCP peer is the client", async () => {
    const forger = loopback();
    const claimed = loopback();
    const answers = await burst(untrusting, [forger], 2 * LIMIT, (_f, i) => ({
      "x-forwarded-for": `${loopback()}`,
      forwarded: `for=${i % 2 ? claimed : loopback()}`,
    }));
    const mine = answers.get(forger)!;
    expectLimited(forger, mine);
    for (const r of mine.filter((x) => x.status === 201)) expect(await auditedAddress(r.clientId!)).to.equal(forger);
    expect((await register(untrusting, claimed)).status, "the claimed address has its whole allowance").to.equal(201);
  });

  it("TRUST_PROXY off behind a proxy: every client is the proxy's address", async () => {
    const r = await register(viaNothing, loopback());
    expect(r.status).to.equal(201);
    expect(await auditedAddress(r.clientId!)).to.equal(proxyAddress);
  });

  it("TRUST_PROXY set to the proxy's address: a peer outside it is not believed, whatever it forwards", async () => {
    // (A hop count trusts whatever peer connects: it is for a gateway reachable only through its proxy.)
    const forger = loopback();
    const r = await register(byCidr, forger, { "x-forwarded-for": loopback(), forwarded: `for=${loopback()}` });
    expect(r.status).to.equal(201);
    expect(await auditedAddress(r.clientId!)).to.equal(forger);
  });

  it("partner token requests through the trusted proxy: success and failure audit records name the real client", async () => {
    const partner = await createPartner(stack);
    const [honest, guesser] = [loopback(), loopback()];
    expect(await mintFrom(viaXff, honest, partner.clientId, partner.clientSecret)).to.equal(200);
    expect(await mintFrom(viaXff, guesser, partner.clientId, `${partner.clientSecret.slice(0, -2)}xx`)).to.equal(401);
    const rows = await stack.core
      .db("audit_records")
      .where({ action: "partner.token.issue", actor: `partner:${partner.clientId}` })
      .select<{ outcome: string; client_address: string }[]>("outcome", "client_address");
    expect(rows.map((r) => `${r.outcome} ${r.client_address}`).sort()).to.deep.equal([`failure ${guesser}`, `success ${honest}`].sort());
  });
});
