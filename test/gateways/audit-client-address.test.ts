import { randomInt } from "node:crypto";
import { request } from "node:http";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { authorize, createJar, createUser, pkce, REDIRECT, registerClient, vaultUrn } from "../support/agent-oauth.js";
import { createOwner, grantFor } from "../support/budgets.js";
import { requireNginx, startNginx, type NginxProxy } from "../support/nginx.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { startStack, type TestStack } from "../support/stack.js";

/** A loopback address of its own per call, so rows left in a reused database never meet. */
const loopback = () => `127.${randomInt(1, 255)}.${randomInt(1, 255)}.${randomInt(2, 255)}`;

interface Answer {
  status: number;
  text: string;
}

/** One HTTP request from `from` (a loopback source address). */
function send(url: string, from: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: `${u.pathname}${u.search}`,
        method: options.method ?? "GET",
        localAddress: from,
        agent: false,
        headers: options.headers,
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode!, text }));
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

/**
 * Every audit record of a request names the client TRUST_PROXY lets the gateway know, including
 * the rows the group-committed statements write (partner reads, simulations, code exchanges,
 * refreshes), where many callers' rows are written by one statement.
 */
describe("audit records name the client behind a trusted proxy (nginx)", () => {
  let stack: TestStack;
  let nginx: NginxProxy;
  let gateway: FastifyInstance;
  let viaProxy: string;
  let core: CoreServer;
  const proxyAddress = loopback();

  before(async function () {
    requireNginx(this);
    stack = await startStack({ gateway: true });
    const issuer = stack.issuer;
    gateway = await buildGateway({
      clients: createCoreClients(createInProcessTransport(stack.core.routes, stack.core.interceptors), { gatewayToken: stack.gatewayToken }),
      logger: stack.logs.logger,
      urls: { issuer, baseUrl: issuer, authUrl: issuer, appUrl: issuer, mcpUrl: issuer },
      trustProxy: [`${proxyAddress}/32`],
    });
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    const upstream = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
    nginx = await startNginx([{ upstream, bind: proxyAddress, headers: { "X-Forwarded-For": "$proxy_add_x_forwarded_for", Forwarded: "" } }]);
    viaProxy = nginx.urls[0]!;
    core = await startCoreServer(stack.core, 0);
  });
  after(async () => {
    await nginx?.close();
    await gateway?.close();
    await core?.close();
    await stack?.close();
  });

  /** The client addresses of the audit rows of `action` about `subject`, counted. */
  async function addresses(where: Record<string, string>): Promise<Record<string, number>> {
    const rows = await stack.core.db("audit_records").where(where).select<{ client_address: string }[]>("client_address");
    const out: Record<string, number> = {};
    for (const r of rows) out[r.client_address] = (out[r.client_address] ?? 0) + 1;
    return out;
  }

  it("partner KYC reads from two clients at once: each success row names its own client", async () => {
    const partner = await createPartner(stack);
    const { userId } = await createUserFor(stack, partner);
    const token = await mintPartnerToken(stack, partner);
    const [a, b] = [loopback(), loopback()];
    const answers = await Promise.all(
      [a, b].flatMap((from) =>
        Array.from({ length: 12 }, () => send(`${viaProxy}/api/partner/users/${userId}/kyc`, from, { headers: { authorization: `Bearer ${token}` } })),
      ),
    );
    expect(answers.map((x) => x.status)).to.deep.equal(Array(24).fill(200));
    expect(await addresses({ action: "partner.kyc.read", subject: userId, outcome: "success" })).to.deep.equal({ [a]: 12, [b]: 12 });
  });

  it("a refused partner read is audited with its client too", async () => {
    const partner = await createPartner(stack);
    const other = await createPartner(stack);
    const { userId } = await createUserFor(stack, other);
    const token = await mintPartnerToken(stack, partner);
    const from = loopback();
    const answer = await send(`${viaProxy}/api/partner/users/${userId}/kyc`, from, { headers: { authorization: `Bearer ${token}` } });
    expect(answer.status).to.equal(404);
    expect(await addresses({ action: "partner.kyc.read", actor: `partner:${partner.clientId}`, outcome: "failure" })).to.deep.equal({ [from]: 1 });
  });

  it("payments.simulate from two clients at once: each row names its own client", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner, { scopes: ["payments:simulate"] });
    const call = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: {
        name: "payments.simulate",
        arguments: {
          counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
          amount_cents: 100,
          currency: "USD",
          idempotency_key: "audit-address-1",
        },
      },
    });
    const headers = { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` };
    const [a, b] = [loopback(), loopback()];
    const answers = await Promise.all(
      [a, b].flatMap((from) => Array.from({ length: 10 }, () => send(`${viaProxy}/mcp/write`, from, { method: "POST", headers, body: call }))),
    );
    for (const x of answers) expect(x.status, x.text).to.equal(200);
    for (const x of answers) expect(JSON.parse(x.text).result?.isError, x.text).to.not.equal(true);
    expect(await addresses({ action: "payments.simulate", actor: `agent:${owner.agentPrincipalId}` })).to.deep.equal({ [a]: 10, [b]: 10 });
  });

  it("an agent's code exchange and refresh: each row names the client that sent it", async () => {
    const user = await createUser(stack);
    const client = (await registerClient(stack)).body as { client_id: string; client_secret: string };
    const jar = createJar(stack.url);
    const { verifier, challenge } = pkce();
    const back = await authorize(stack, jar, user.email, {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      resource: [vaultUrn(user.vaultId)],
      state: "st-1",
    });
    const form = (fields: Record<string, string>) => ({
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ ...fields, client_id: client.client_id, client_secret: client.client_secret }).toString(),
    });
    const [exchanger, refresher] = [loopback(), loopback()];
    const exchanged = await send(
      `${viaProxy}/oauth2/token`,
      exchanger,
      form({ grant_type: "authorization_code", code: back.searchParams.get("code")!, redirect_uri: REDIRECT, code_verifier: verifier }),
    );
    expect(exchanged.status, exchanged.text).to.equal(200);
    const { refresh_token } = JSON.parse(exchanged.text) as { refresh_token: string };
    const refreshed = await send(`${viaProxy}/oauth2/token`, refresher, form({ grant_type: "refresh_token", refresh_token }));
    expect(refreshed.status, refreshed.text).to.equal(200);
    expect(await addresses({ action: "oauth.code_exchange", actor: `client:${client.client_id}` })).to.deep.equal({ [exchanger]: 1 });
    expect(await addresses({ action: "agent.grant.refresh", actor: `client:${client.client_id}` })).to.deep.equal({ [refresher]: 1 });
  });

  it("a caller on core's gRPC port without the gateway credential cannot name an address (the row says none)", async () => {
    const partner = await createPartner(stack);
    const { userId } = await createUserFor(stack, partner);
    const accessToken = await mintPartnerToken(stack, partner);
    const resources = createClient(PartnerResourcesService, createGrpcTransport({ baseUrl: core.url }));
    const forged = { "x-vaultgate-client-address": "203.0.113.66", "x-vaultgate-gateway": "not-the-credential", "x-forwarded-for": "203.0.113.67" };
    await resources.getKycStatus({ accessToken, userId }, { headers: forged });
    expect(await addresses({ action: "partner.kyc.read", subject: userId })).to.deep.equal({ "": 1 });
  });
});
