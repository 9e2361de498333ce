/**
 * The hot paths against a database grown by SQL (audit rows, users, grants, payment history)
 * next to a fresh one, in alternating rounds; both as shipped, fixtures made through the API
 * in each. What is seeded and the target are in docs/benchmarks.md.
 */
import { createHash, randomBytes } from "node:crypto";
import { createRouterTransport } from "@connectrpc/connect";
import { AUDIT_ROWS, BENCH_VAULT_PAYMENTS, GRANTS_PER_USER, PAYMENT_VAULTS, PAYMENTS_PER_VAULT, seed, USERS } from "./grown-data-seed.js";
import { createCore, type Core } from "../core/core.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { buildGateway } from "../gateways/app.js";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { PartnerStatus } from "../gen/vaultgate/partners/v1/partners_pb.js";
import {
  alternate,
  benchDatabase,
  benchLogger,
  fundedAgentBudget,
  load,
  QUICK,
  NEAR_ONE_ROUNDS,
  settleBenchPostgres,
  verdict,
  type BodyCheck,
  type LoadSpec,
} from "./support.js";

const CONNECTIONS = 50;
const INITIATES = QUICK ? 1500 : 5000;
const REDIRECT = "http://127.0.0.1:9/cb";
const verifier = randomBytes(32).toString("base64url");
const challenge = createHash("sha256").update(verifier).digest("base64url");

interface Stack {
  name: string;
  url: string;
  dbUrl: string;
  core: Core;
  admin: CoreClients;
  clients: CoreClients;
  partnerId: string;
  kycPath: string;
  partnerToken: string;
  userId: string;
  budgetVaultId: string;
  agentToken: string;
  oauth: { clientId: string; clientSecret: string; refreshTokens(n: number): Promise<string[]> };
  close(): Promise<void>;
}

async function startStack(name: string, dbUrl: string): Promise<Stack> {
  const adminToken = randomBytes(16).toString("hex");
  const gatewayToken = randomBytes(16).toString("hex");
  const { createServer } = await import("node:net");
  const port = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const origin = `http://127.0.0.1:${port}`;
  const core = await createCore({
    db: { url: dbUrl, poolMax: 20 },
    logger: benchLogger(`grown-data-${name}-core`),
    adminToken,
    gatewayToken,
    issuer: origin,
    mcpUrl: origin,
    partnerAudience: "urn:vaultgate:partner-api",
    webhookPollMs: 0,
    // Saturating loads from one partner and one agent would meet the shipped limits.
    resourceRateLimits: { default: 1_000_000_000 },
    provisioningLimitPerMinute: 1_000_000,
  });
  const clients = createCoreClients(createInProcessTransport(core.routes, core.interceptors), { gatewayToken });
  const admin = createCoreClients(
    createRouterTransport(core.routes, {
      router: { interceptors: core.interceptors },
      transport: {
        interceptors: [
          (next) => (req) => {
            req.header.set("authorization", `Bearer ${adminToken}`);
            return next(req);
          },
        ],
      },
    }),
  );
  const gateway = await buildGateway({
    clients,
    logger: benchLogger(`grown-data-${name}-gateway`),
    urls: { issuer: origin, baseUrl: origin, authUrl: origin, appUrl: origin, mcpUrl: origin },
  });
  await gateway.listen({ port, host: "127.0.0.1" });

  // Partner, a user with consent and KYC, a partner token.
  const created = await admin.partners.createPartner({ name: "Bench", slug: `bench-${randomBytes(3).toString("hex")}`, status: PartnerStatus.ACTIVE });
  const email = `bench-${randomBytes(4).toString("hex")}@example.test`;
  const user = await admin.partners.createUser({ email });
  await admin.partnerResources.grantConsent({ clientId: created.partner!.clientId, userId: user.userId });
  await admin.partnerResources.setKycStatus({ userId: user.userId, status: "approved", provider: "sandbox" });
  const partnerToken = (await admin.partners.issueToken({ clientId: created.partner!.clientId, clientSecret: created.clientSecret })).accessToken;

  // A budget vault with a policy (per-tx, daily and lifetime caps: the checks that read
  // spend), funded, and a child agent's token on it.
  const scopes = ["agent:budget:create", "accounts:read", "payments:initiate", "payments:simulate"];
  const { vaultId: budgetVaultId, agentToken } = await fundedAgentBudget(admin, origin, {
    scopes,
    caps: { amount_cap_cents_per_tx: 100_000, amount_cap_cents_per_day: 1_000_000_000_000, amount_cap_cents_lifetime: 1_000_000_000_000 },
    fundCents: 1_000_000_000_000n,
    user,
  });

  // An OAuth client with refresh lineages (sign-in, approval, code exchange).
  const ch = await clients.grants.startSignIn({ email });
  const { messages } = await admin.grants.listOutbox({ email });
  const otp = /\d{6}/.exec(messages[0]!.subject)![0];
  const { sessionToken } = await clients.grants.completeSignIn({ challengeId: ch.challengeId, code: otp });
  const reg = await clients.grants.registerClient({
    clientName: "bench",
    redirectUris: [REDIRECT],
    tokenEndpointAuthMethod: "client_secret_post",
    scope: "accounts:read",
  });
  const request = {
    clientId: reg.client!.clientId,
    redirectUri: REDIRECT,
    scope: "accounts:read",
    resources: [`urn:vaultgate:vault:${user.vaultId}`],
    codeChallenge: challenge,
    codeChallengeMethod: "S256",
    sessionToken: "",
  };
  const refreshTokens = async (n: number) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const { code } = await clients.grants.approveAuthorization({ request, sessionToken, vaultId: user.vaultId });
      const t = await clients.grants.exchangeCode({
        clientId: reg.client!.clientId,
        clientSecret: reg.clientSecret,
        code,
        redirectUri: REDIRECT,
        codeVerifier: verifier,
      });
      out.push(t.token!.refreshToken);
    }
    return out;
  };
  return {
    name,
    url: origin,
    dbUrl,
    core,
    admin,
    clients,
    partnerId: created.partner!.partnerId,
    kycPath: `/api/partner/users/${user.userId}/kyc`,
    partnerToken,
    userId: user.userId,
    budgetVaultId,
    agentToken,
    oauth: { clientId: reg.client!.clientId, clientSecret: reg.clientSecret, refreshTokens },
    async close() {
      await gateway.close();
      await core.close();
    },
  };
}

export { seedUuidv7 } from "./grown-data-seed.js";

export async function run(): Promise<void> {
  const freshDb = await benchDatabase();
  const grownDb = await benchDatabase();
  const fresh = await startStack("fresh", freshDb.url);
  const grown = await startStack("grown", grownDb.url);
  try {
    console.log(
      `growing the database: ${AUDIT_ROWS} audit rows, ${USERS} users with consent, ${USERS * GRANTS_PER_USER} grants, ${PAYMENT_VAULTS} vaults x ${PAYMENTS_PER_VAULT} payments, bench vault ${BENCH_VAULT_PAYMENTS} payments`,
    );
    await seed(grown);
    // A database that grew over months has long written its pages out; one seeded a
    // moment ago still holds its bulk load dirty in memory, and a checkpoint during the
    // first path measured would charge that path for it.
    await settleBenchPostgres();

    const mcp = (s: Stack) => ({ "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${s.agentToken}` });
    const tool = (name: string, key: string) =>
      JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: {
          name,
          arguments: {
            counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
            amount_cents: 100,
            currency: "USD",
            idempotency_key: key,
          },
        },
      });
    const tokenCheck: BodyCheck = { status: 200, keys: ["access_token", "refresh_token", "token_type"] };
    // The expected shapes, from one checked answer of the fresh stack.
    const shape = async (url: string, init: RequestInit, jsonrpc: boolean): Promise<BodyCheck> => {
      const r = await fetch(url, init);
      const body = (await r.json()) as Record<string, unknown> & { result?: { structuredContent?: object; isError?: boolean }; error?: unknown };
      if (r.status !== 200 || body.error || (jsonrpc && (!body.result?.structuredContent || body.result.isError)))
        throw new Error(`sample failed: ${r.status} ${JSON.stringify(body)}`);
      return jsonrpc
        ? { jsonrpc: true, keys: Object.keys(body.result!.structuredContent!).map((k) => `result.structuredContent.${k}`) }
        : { status: 200, keys: Object.keys(body) };
    };
    const kycCheck = await shape(`${fresh.url}${fresh.kycPath}`, { headers: { authorization: `Bearer ${fresh.partnerToken}` } }, false);
    const simulateCheck = await shape(
      `${fresh.url}/mcp/write`,
      { method: "POST", headers: mcp(fresh), body: tool("payments.simulate", "bench-sim-sample") },
      true,
    );
    const initiateCheck = await shape(
      `${fresh.url}/mcp/write`,
      { method: "POST", headers: mcp(fresh), body: tool("payments.initiate", "bench-pay-sample") },
      true,
    );

    let batch = 0;
    const paths: { name: string; spec: (s: Stack) => Promise<LoadSpec> }[] = [
      {
        name: "partner GET /users/<id>/kyc",
        spec: async (s) => ({ url: `${s.url}${s.kycPath}`, headers: { authorization: `Bearer ${s.partnerToken}` }, connections: CONNECTIONS, check: kycCheck }),
      },
      {
        name: "payments.simulate",
        spec: async (s) => ({
          url: `${s.url}/mcp/write`,
          method: "POST",
          headers: mcp(s),
          body: tool("payments.simulate", "bench-sim-0001"),
          connections: CONNECTIONS,
          check: simulateCheck,
        }),
      },
      {
        name: "payments.initiate",
        spec: async (s) => {
          const b = ++batch;
          return {
            url: `${s.url}/mcp/write`,
            method: "POST",
            headers: mcp(s),
            bodies: Array.from({ length: INITIATES }, (_, i) => tool("payments.initiate", `bench-pay-${b}-${i}`)),
            connections: CONNECTIONS,
            check: initiateCheck,
          };
        },
      },
      {
        name: "refresh",
        spec: async (s) => ({
          url: `${s.url}/oauth2/token`,
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          rotate: {
            tokens: await s.oauth.refreshTokens(CONNECTIONS * 2),
            field: "refresh_token",
            form: { grant_type: "refresh_token", client_id: s.oauth.clientId, client_secret: s.oauth.clientSecret },
          },
          connections: CONNECTIONS,
          check: tokenCheck,
        }),
      },
    ];
    const only = process.env.BENCH_GROWN_PATHS; // e.g. "kyc,refresh": the paths whose names contain one of these
    const results = [];
    for (const path of paths.filter((p) => !only || only.split(",").some((w) => p.name.includes(w.trim())))) {
      for (const s of [grown, fresh]) await load({ ...(await path.spec(s)), ...(path.name === "payments.initiate" ? {} : { seconds: 2 }) }); // warm-up
      const r = await alternate(
        `${path.name}, ${CONNECTIONS} connections: grown vs fresh database`,
        [grown, fresh].map((s) => ({ name: s.name, measure: async () => load({ ...(await path.spec(s)), server: process.pid }) })),
        NEAR_ONE_ROUNDS,
      );
      results.push({ path: path.name, r });
    }
    for (const { path, r } of results) {
      verdict(
        `${path} on the grown database >= 0.95x the fresh one`,
        `${r.ratio.toFixed(2)}x (rounds ${r.ratios.map((x) => x.toFixed(2)).join(", ")})`,
        r.ratio >= 0.95 && r.failures === 0,
      );
    }
  } finally {
    await grown.close();
    await fresh.close();
    await grownDb.drop();
    await freshDb.drop();
  }
}
