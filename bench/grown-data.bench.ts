/**
 * The hot paths against a grown database next to a fresh one, in alternating rounds:
 * partner GET /users/<id>/kyc, payments.simulate and payments.initiate through
 * /mcp/write, and the refresh-token grant. The grown database gets, by SQL (fast,
 * generate_series): 1,000,000 audit rows, 50,000 users with a vault, an agent, KYC and
 * consent to the bench partner, 150,000 grants, ten vaults with 10,000 payments each, and
 * the bench's own budget vault with 100,000 payments of history (grant and request ids
 * time-ordered, as the product makes them). Target for each path:
 * grown/fresh >= 0.95x (median of the per-round req/s ratios).
 *
 * Both stacks run as shipped (in-process core and gateway as `vaultgate serve --role
 * all`, the production logger at info, pool of 20, durable Postgres); the fixtures are
 * made through the API the same way in both databases, then the grown one is seeded.
 */
import { createHash, randomBytes } from "node:crypto";
import { createRouterTransport } from "@connectrpc/connect";
import pg from "pg";
import { createCore, type Core } from "../core/core.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { buildGateway } from "../gateways/app.js";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { PartnerStatus } from "../gen/vaultgate/partners/v1/partners_pb.js";
import { alternate, benchDatabase, benchLogger, fmt, fundedAgentBudget, load, QUICK, NEAR_ONE_ROUNDS, settleBenchPostgres, verdict, type BodyCheck, type LoadSpec } from "./support.js";

const SCALE = Number(process.env.BENCH_GROWN_SCALE ?? 1); // BENCH_GROWN_SCALE=0.1 for a quick try
const AUDIT_ROWS = Math.round(1_000_000 * SCALE);
const USERS = Math.round(50_000 * SCALE);
const GRANTS_PER_USER = 3;
const PAYMENT_VAULTS = 10;
const PAYMENTS_PER_VAULT = Math.round(10_000 * SCALE);
const BENCH_VAULT_PAYMENTS = Math.round(100_000 * SCALE);
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
      transport: { interceptors: [(next) => (req) => (req.header.set("authorization", `Bearer ${adminToken}`), next(req))] },
    }),
  );
  const gateway = await buildGateway({ clients, logger: benchLogger(`grown-data-${name}-gateway`), urls: { issuer: origin, baseUrl: origin, authUrl: origin, appUrl: origin, mcpUrl: origin } });
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
  const reg = await clients.grants.registerClient({ clientName: "bench", redirectUris: [REDIRECT], tokenEndpointAuthMethod: "client_secret_post", scope: "accounts:read" });
  const request = { clientId: reg.client!.clientId, redirectUri: REDIRECT, scope: "accounts:read", resources: [`urn:vaultgate:vault:${user.vaultId}`], codeChallenge: challenge, codeChallengeMethod: "S256", sessionToken: "" };
  const refreshTokens = async (n: number) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const { code } = await clients.grants.approveAuthorization({ request, sessionToken, vaultId: user.vaultId });
      const t = await clients.grants.exchangeCode({ clientId: reg.client!.clientId, clientSecret: reg.clientSecret, code, redirectUri: REDIRECT, codeVerifier: verifier });
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

/**
 * SQL for a UUIDv7 (text) made at the timestamptz `at`, as lib/uuidv7.ts makes one: the
 * 48-bit milliseconds and the version digit over a random v4 (whose variant bits are v7's
 * too). The product makes grant ids and request ids this way, so their indexes grow at the
 * right edge; the seed makes them from each seeded row's own time. Random ones would send
 * every new id into the middle of an index of a million keys, splitting pages a database
 * of ours never splits.
 */
export const seedUuidv7 = (at: string) =>
  `overlay(gen_random_uuid()::text PLACING regexp_replace(lpad(to_hex(floor(extract(epoch FROM ${at}) * 1000)::bigint), 12, '0'), '^(.{8})(.{4})$', '\\1-\\2-7') FROM 1 FOR 15)`;

/** Grows `stack`'s database by SQL around its fixtures. */
async function seed(stack: Stack): Promise<void> {
  const client = new pg.Client({ connectionString: stack.dbUrl });
  await client.connect();
  const t0 = performance.now();
  const step = async (label: string, sql: string, params: unknown[] = []) => {
    const t = performance.now();
    const r = await client.query(sql, params);
    console.log(`  seed: ${label}: ${r.rowCount ?? 0} rows, ${fmt((performance.now() - t) / 1000, 1)} s`);
  };
  try {
    await client.query("CREATE TEMP TABLE seed_users AS SELECT g AS n, gen_random_uuid() AS user_id, gen_random_uuid() AS vault_id, gen_random_uuid() AS agent_id FROM generate_series(1, $1::int) g", [USERS]);
    await step("users", "INSERT INTO users (id, email, status, created_at) SELECT user_id, 'seed-' || n || '@example.test', 'active', now() - (n % 700) * interval '1 day' FROM seed_users");
    await step("vaults", "INSERT INTO vaults (id, owner_user_id, balance_cents, currency, created_at) SELECT vault_id, user_id, 10000, 'USD', now() - (n % 700) * interval '1 day' FROM seed_users");
    await step("agent principals", "INSERT INTO agent_principals (id, user_id, vault_id, display_name, created_at) SELECT agent_id, user_id, vault_id, 'seed agent', now() - (n % 700) * interval '1 day' FROM seed_users");
    await step("partner users", "INSERT INTO partner_users (partner_id, user_id, created_at) SELECT $1, user_id, now() FROM seed_users", [stack.partnerId]);
    await step(
      "consents (the bench user's scopes)",
      "INSERT INTO consents (partner_id, user_id, scopes, updated_at) SELECT $1, s.user_id, c.scopes, now() FROM seed_users s, (SELECT scopes FROM consents WHERE partner_id = $1 AND user_id = $2) c",
      [stack.partnerId, stack.userId],
    );
    await step("KYC", "INSERT INTO user_kyc (user_id, status, provider, updated_at) SELECT user_id, CASE WHEN n % 3 = 0 THEN 'pending' ELSE 'approved' END, 'sandbox', now() FROM seed_users");
    await step(
      "grants (superseded, revoked, active)",
      `INSERT INTO grants (id, lineage_id, user_id, agent_principal_id, vault_id, scopes, state, issued_at, expires_at, refresh_hash, state_changed_at)
       SELECT ${seedUuidv7("at")}::uuid, s.vault_id, s.user_id, s.agent_id, s.vault_id, ARRAY['accounts:read'],
              (ARRAY['superseded', 'revoked', 'active'])[k], at, now() + interval '30 days',
              md5('seed-refresh-' || s.n || '-' || k), now() - interval '1 day'
       FROM seed_users s, generate_series(1, $1::int) k, LATERAL (SELECT now() - interval '2 days' - (s.n * $1::int + k) * interval '1 second' AS at) t
       ORDER BY at`,
      [GRANTS_PER_USER],
    );
    const payments = (vault: string, user: string, count: number, label: string) =>
      step(
        label,
        `INSERT INTO agent_payments (id, vault_id, user_id, grant_id, idempotency_key, params_hash, address, chain, token, amount_cents, currency, status, created_at, approved_at, completed_at)
         SELECT gen_random_uuid(), $1, $2, 'seed-grant', 'seed-' || g, md5('seed-' || g), '0xseed', 'base', 'USDC', 100, 'USD', 'completed',
                now() - interval '3 days' - g * interval '1 minute', now() - interval '3 days' - g * interval '1 minute', now() - interval '3 days' - g * interval '1 minute'
         FROM generate_series(1, $3::int) g`,
        [vault, user, count],
      );
    const { rows } = await client.query("SELECT user_id, vault_id FROM seed_users ORDER BY n LIMIT $1", [PAYMENT_VAULTS]);
    for (const [i, r] of (rows as { user_id: string; vault_id: string }[]).entries()) await payments(r.vault_id, r.user_id, PAYMENTS_PER_VAULT, `payments, vault ${i + 1} of ${PAYMENT_VAULTS}`);
    await payments(stack.budgetVaultId, stack.userId, BENCH_VAULT_PAYMENTS, "payments of the bench's budget vault");
    // Running totals on vaults, where the schema has them: the seeded history is older
    // than a day, so it adds to the lifetime total only.
    const cols = (await client.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'vaults' AND column_name LIKE 'spent%'")).rows.map((r: { column_name: string }) => r.column_name);
    if (cols.includes("spent_lifetime_cents")) {
      await step(
        "vault running totals (spent_lifetime_cents)",
        `UPDATE vaults v SET spent_lifetime_cents = v.spent_lifetime_cents + s.total
         FROM (SELECT vault_id, sum(amount_cents) AS total FROM agent_payments WHERE idempotency_key LIKE 'seed-%' GROUP BY vault_id) s WHERE v.id = s.vault_id`,
      );
    } else {
      console.log(`  seed: vaults have no running-total columns (${cols.join(", ") || "none"}); policy checks read the payments`);
    }
    await step(
      "audit rows",
      `INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
       SELECT ${seedUuidv7("at")}, 'partner:seed', (ARRAY['partner.kyc.read', 'grants.refresh', 'payments.initiate', 'payments.simulate'])[1 + g % 4],
              CASE WHEN g % 50 = 0 THEN 'failure' ELSE 'success' END, '', 'user:' || g % 50000, at
       FROM generate_series($1::int, 1, -1) g, LATERAL (SELECT now() - g * interval '1 second' AS at) t`,
      [AUDIT_ROWS],
    );
    // What autovacuum would have done by now on a database that grew over time.
    await step("VACUUM ANALYZE", "VACUUM ANALYZE");
    console.log(`  seed: done in ${fmt((performance.now() - t0) / 1000, 1)} s`);
  } finally {
    await client.end();
  }
}

export async function run(): Promise<void> {
  const freshDb = await benchDatabase();
  const grownDb = await benchDatabase();
  const fresh = await startStack("fresh", freshDb.url);
  const grown = await startStack("grown", grownDb.url);
  try {
    console.log(`growing the database: ${AUDIT_ROWS} audit rows, ${USERS} users with consent, ${USERS * GRANTS_PER_USER} grants, ${PAYMENT_VAULTS} vaults x ${PAYMENTS_PER_VAULT} payments, bench vault ${BENCH_VAULT_PAYMENTS} payments`);
    await seed(grown);
    // A database that grew over months has long written its pages out; one seeded a
    // moment ago still holds its bulk load dirty in memory, and a checkpoint during the
    // first path measured would charge that path for it.
    await settleBenchPostgres();

    const mcp = (s: Stack) => ({ "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${s.agentToken}` });
    const tool = (name: string, key: string) =>
      JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: { counterparty: { address: "0xabc", chain: "base", token: "USDC" }, amount_cents: 100, currency: "USD", idempotency_key: key } } });
    const tokenCheck: BodyCheck = { status: 200, keys: ["access_token", "refresh_token", "token_type"] };
    // The expected shapes, from one checked answer of the fresh stack.
    const shape = async (url: string, init: RequestInit, jsonrpc: boolean): Promise<BodyCheck> => {
      const r = await fetch(url, init);
      const body = (await r.json()) as Record<string, unknown> & { result?: { structuredContent?: object; isError?: boolean }; error?: unknown };
      if (r.status !== 200 || body.error || (jsonrpc && (!body.result?.structuredContent || body.result.isError))) throw new Error(`sample failed: ${r.status} ${JSON.stringify(body)}`);
      return jsonrpc ? { jsonrpc: true, keys: Object.keys(body.result!.structuredContent!).map((k) => `result.structuredContent.${k}`) } : { status: 200, keys: Object.keys(body) };
    };
    const kycCheck = await shape(`${fresh.url}${fresh.kycPath}`, { headers: { authorization: `Bearer ${fresh.partnerToken}` } }, false);
    const simulateCheck = await shape(`${fresh.url}/mcp/write`, { method: "POST", headers: mcp(fresh), body: tool("payments.simulate", "bench-sim-sample") }, true);
    const initiateCheck = await shape(`${fresh.url}/mcp/write`, { method: "POST", headers: mcp(fresh), body: tool("payments.initiate", "bench-pay-sample") }, true);

    let batch = 0;
    const paths: { name: string; spec: (s: Stack) => Promise<LoadSpec> }[] = [
      { name: "partner GET /users/<id>/kyc", spec: async (s) => ({ url: `${s.url}${s.kycPath}`, headers: { authorization: `Bearer ${s.partnerToken}` }, connections: CONNECTIONS, check: kycCheck }) },
      { name: "payments.simulate", spec: async (s) => ({ url: `${s.url}/mcp/write`, method: "POST", headers: mcp(s), body: tool("payments.simulate", "bench-sim-0001"), connections: CONNECTIONS, check: simulateCheck }) },
      {
        name: "payments.initiate",
        spec: async (s) => {
          const b = ++batch;
          return { url: `${s.url}/mcp/write`, method: "POST", headers: mcp(s), bodies: Array.from({ length: INITIATES }, (_, i) => tool("payments.initiate", `bench-pay-${b}-${i}`)), connections: CONNECTIONS, check: initiateCheck };
        },
      },
      {
        name: "refresh",
        spec: async (s) => ({
          url: `${s.url}/oauth2/token`,
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          rotate: { tokens: await s.oauth.refreshTokens(CONNECTIONS * 2), field: "refresh_token", form: { grant_type: "refresh_token", client_id: s.oauth.clientId, client_secret: s.oauth.clientSecret } },
          connections: CONNECTIONS,
          check: tokenCheck,
        }),
      },
    ];
    const only = process.env.BENCH_GROWN_PATHS; // e.g. "kyc,refresh": the paths whose names contain one of these
    const results = [];
    for (const path of paths.filter((p) => !only || only.split(",").some((w) => p.name.includes(w.trim())))) {
      for (const s of [grown, fresh]) await load({ ...(await path.spec(s)), ...(path.name === "payments.initiate" ? {} : { seconds: 2 }) }); // warm-up
      const r = await alternate(`${path.name}, ${CONNECTIONS} connections: grown vs fresh database`, [grown, fresh].map((s) => ({ name: s.name, measure: async () => load({ ...(await path.spec(s)), server: process.pid }) })), NEAR_ONE_ROUNDS);
      results.push({ path: path.name, r });
    }
    for (const { path, r } of results) {
      verdict(`${path} on the grown database >= 0.95x the fresh one`, `${r.ratio.toFixed(2)}x (rounds ${r.ratios.map((x) => x.toFixed(2)).join(", ")})`, r.ratio >= 0.95 && r.failures === 0);
    }
  } finally {
    await grown.close();
    await fresh.close();
    await grownDb.drop();
    await freshDb.drop();
  }
}
