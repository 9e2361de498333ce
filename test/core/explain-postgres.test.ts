import { expect } from "chai";
import { randomBytes } from "node:crypto";
import type { Knex } from "knex";
import { startStack, type TestStack } from "../support/stack.js";
import { usingPostgres } from "../support/db.js";
import { grantFor, payment } from "../support/budgets.js";
import { fundedChild } from "../support/spend.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { createRateLimitStore } from "../../core/rate-limits/store.js";
import { fixtures } from "../support/trust.js";

/** Tables that grow with users, grants, payments and traffic: a hot statement must never scan one. */
const HOT_TABLES = new Set([
  "agent_payments",
  "grants",
  "audit_records",
  "users",
  "vaults",
  "vault_policies",
  "consents",
  "partner_users",
  "user_kyc",
  "rate_limit_logs",
  "rate_limit_windows",
  "authorization_codes",
  "oauth_clients",
  "partners",
]);

/** The most rows a scan of a hot table may expect to read when nothing above it limits the rows. */
const MAX_UNLIMITED_ROWS = 100;

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Plan Rows"?: number;
  Plans?: PlanNode[];
}

/**
 * What is wrong with a plan: a sequential scan of a hot table, or an index scan of one
 * expected to read more than a few rows with no LIMIT above it (reading a vault's whole
 * payment history through an index is still linear in it).
 */
function seqScans(node: PlanNode, out: string[] = [], limited = false): string[] {
  const table = node["Relation Name"];
  const type = node["Node Type"];
  if (table && HOT_TABLES.has(table)) {
    if (type === "Seq Scan") out.push(`Seq Scan on ${table}`);
    else if (/Scan$/.test(type) && !limited && (node["Plan Rows"] ?? 0) > MAX_UNLIMITED_ROWS) out.push(`${type} on ${table} expecting ${node["Plan Rows"]} rows, unlimited`);
  }
  for (const child of node.Plans ?? []) seqScans(child, out, limited || type === "Limit");
  return out;
}

interface Captured {
  sql: string;
  bindings: unknown[];
}

/**
 * The plans of the hot paths' real statements on a database seeded with thousands of rows
 * per hot table: every statement the calls below send is captured as sent (SQL and
 * bindings) and EXPLAINed, and a group-committed PL/pgSQL batch function is checked by
 * EXPLAINing the statement inside it with the same arguments and the function's settings.
 * PostgreSQL only: PGlite plans with the same planner but the point is the server's plans
 * on realistic table sizes, and the seeding relies on its statistics (ANALYZE).
 */
describe("Hot statements use indexes on a seeded database (EXPLAIN, Postgres)", function () {
  this.timeout(180_000);
  let stack: TestStack;
  before(async function () {
    if (!usingPostgres()) this.skip(); // the plans asserted are PostgreSQL's, on a server-sized seeded database
    // No webhook poller: a capture holds exactly the statements the calls below send. The
    // poller's query, caught when a poll happened to fall inside a capture, was checked by
    // chance, against whatever the shared test database held at that moment.
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack?.close());

  async function seed(partnerId: string, child: { vaultId: string; agentPrincipalId: string; userId: string }) {
    const db = stack.core.db;
    const tag = randomBytes(4).toString("hex");
    await db.raw(
      `WITH u AS (
         INSERT INTO users (id, email, status, created_at)
         SELECT gen_random_uuid(), 'seed-' || i || '-' || ? || '@example.test', 'active', now() FROM generate_series(1, 4000) i RETURNING id),
       v AS (INSERT INTO vaults (id, owner_user_id, created_at) SELECT gen_random_uuid(), id, now() FROM u RETURNING id, owner_user_id),
       p AS (INSERT INTO vault_policies (vault_id, status, version, purpose, chain_allowlist, created_at, updated_at)
             SELECT id, 'active', 1, 'trip', '{base}', now(), now() FROM v),
       a AS (INSERT INTO agent_principals (id, user_id, vault_id, display_name, created_at)
             SELECT gen_random_uuid(), owner_user_id, id, 'seed', now() FROM v RETURNING id, user_id, vault_id),
       g AS (INSERT INTO grants (id, lineage_id, user_id, agent_principal_id, vault_id, scopes, state, issued_at, expires_at, state_changed_at)
             SELECT s.gid, s.gid, s.user_id, s.id, s.vault_id, '{}', 'active', now(), now() + interval '1 hour', now()
               FROM (SELECT gen_random_uuid() AS gid, a.* FROM a) s),
       c AS (INSERT INTO consents (partner_id, user_id, scopes, updated_at) SELECT ?::uuid, id, '{kyc:read}', now() FROM u),
       r AS (INSERT INTO partner_users (partner_id, user_id, created_at) SELECT ?::uuid, id, now() FROM u)
       INSERT INTO user_kyc (user_id, status, provider, updated_at) SELECT id, 'approved', 'sandbox', now() FROM u`,
      [tag, partnerId, partnerId],
    );
    // One vault with a long payment history, and the rest of the audit trail.
    await db.raw(
      `INSERT INTO agent_payments (id, vault_id, user_id, agent_principal_id, grant_id, idempotency_key, params_hash, address, chain, token,
                                   amount_cents, currency, status, created_at, completed_at)
       SELECT gen_random_uuid(), ?, ?, ?, 'seed', 'seed-' || i, 'h', '0xabc', 'base', 'USDC', 1, 'USD', 'completed', t, t
         FROM generate_series(1, 5000) i, LATERAL (SELECT now() - make_interval(hours => i) AS t) x`,
      [child.vaultId, child.userId, child.agentPrincipalId],
    );
    await db.raw(
      `INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
       SELECT 'seed', CASE WHEN i % 2 = 0 THEN 'agent:' || ? ELSE 'agent:seed-' || (i % 500) END, 'seed', 'success', '', '', now()
         FROM generate_series(1, 6000) i`,
      [child.agentPrincipalId],
    );
    await db.raw(`INSERT INTO rate_limit_logs (key, hits, allowed, expires_at) SELECT 'seed:' || ? || ':' || i, ARRAY[now()], true, now() + interval '1 minute' FROM generate_series(1, 4000) i`, [tag]);
    await db.raw(`INSERT INTO rate_limit_windows (key, window_start, count) SELECT 'seed:' || ? || ':' || i, date_trunc('minute', now()), 1 FROM generate_series(1, 4000) i`, [tag]);
    for (const t of HOT_TABLES) await db.raw(`ANALYZE ${t}`);
  }

  /**
   * The token endpoints' tables at size: 4,000 registered clients, 4,000 partners, an
   * unexpired code for each seeded user, and a refresh token on each seeded grant.
   * Resolves to a cleanup that deletes the clients, partners and codes again: the test
   * database is shared by the whole run, and other suites page through every partner.
   */
  async function seedTokens(): Promise<() => Promise<void>> {
    const db = stack.core.db;
    const tag = randomBytes(4).toString("hex");
    await db.raw(
      `INSERT INTO oauth_clients (client_id, secret_hash, client_name, redirect_uris, grant_types, response_types, token_endpoint_auth_method, scopes, created_at)
       SELECT 'seed-' || ? || '-' || i, 'x', 'seed', '{http://127.0.0.1:9/cb}', '{authorization_code,refresh_token}', '{code}', 'client_secret_post', '{accounts:read}', now()
         FROM generate_series(1, 4000) i`,
      [tag],
    );
    await db.raw(
      `INSERT INTO partners (id, name, slug, client_id, secret_hash, status, entitlements, created_at, updated_at)
       SELECT gen_random_uuid(), 'Seed', 'seed-' || ? || '-' || i, 'seed-' || ? || '-' || i, 'x', 'active', '{kyc:read}', now(), now()
         FROM generate_series(1, 4000) i`,
      [tag, tag],
    );
    await db.raw(
      `INSERT INTO authorization_codes (code_hash, client_id, user_id, agent_principal_id, vault_id, scopes, redirect_uri, code_challenge, step_up, expires_at)
       SELECT md5(? || a.id::text), 'seed-' || ? || '-1', a.user_id, a.id, a.vault_id, '{accounts:read}', 'http://127.0.0.1:9/cb', 'c', false, now() + interval '10 minutes'
         FROM agent_principals a WHERE a.display_name = 'seed'`,
      [tag, tag],
    );
    await db.raw(`UPDATE grants SET refresh_hash = md5(? || id::text) WHERE refresh_hash IS NULL AND scopes = '{}'`, [tag]);
    for (const t of HOT_TABLES) await db.raw(`ANALYZE ${t}`);
    return async () => {
      await db.raw(`DELETE FROM authorization_codes WHERE client_id = 'seed-' || ? || '-1'`, [tag]);
      await db.raw(`DELETE FROM oauth_clients WHERE client_id LIKE 'seed-' || ? || '-%'`, [tag]);
      await db.raw(`DELETE FROM partners WHERE client_id LIKE 'seed-' || ? || '-%'`, [tag]);
    };
  }

  /** Every statement `work` sends through core's database handle. */
  async function capture(work: () => Promise<unknown>): Promise<Captured[]> {
    const seen: Captured[] = [];
    const listener = (q: { sql: string; bindings?: unknown[] }) => {
      if (/^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|SHOW)\b/i.test(q.sql)) return;
      // As sent: positional $n parameters, back into knex's ? form for EXPLAIN.
      const bindings: unknown[] = [];
      const sql = q.sql.replace(/\$(\d+)\b/g, (_, n: string) => {
        bindings.push((q.bindings ?? [])[Number(n) - 1]);
        return "?";
      });
      seen.push({ sql, bindings });
    };
    stack.core.db.on("query", listener);
    try {
      await work();
    } finally {
      stack.core.db.off("query", listener);
    }
    return seen;
  }

  async function explain(conn: Knex | Knex.Transaction, sql: string, bindings: readonly unknown[]): Promise<PlanNode> {
    const { rows } = await conn.raw(`EXPLAIN (FORMAT JSON) ${sql}`, bindings as Knex.RawBinding[]);
    const plan = (rows as { "QUERY PLAN": unknown }[])[0]!["QUERY PLAN"];
    return ((typeof plan === "string" ? JSON.parse(plan) : plan) as { Plan: PlanNode }[])[0]!.Plan;
  }

  /**
   * Both plans PostgreSQL may run a statement with, under `settings` (name=value): the
   * custom plan for these arguments, and the generic plan a prepared statement or a PL/pgSQL
   * function settles on (the hot statements are prepared; the batch functions force it).
   */
  async function plans(sql: string, bindings: readonly unknown[], settings: readonly string[] = []): Promise<{ custom: PlanNode; generic: PlanNode }> {
    return stack.core.db.transaction(async (trx) => {
      for (const setting of settings) {
        const [k, v] = setting.split("=");
        await trx.raw(`SELECT set_config(?, ?, true)`, [k, v]);
      }
      const custom = await explain(trx, sql, bindings);
      await trx.raw(`SET LOCAL plan_cache_mode = force_generic_plan`);
      let n = 0;
      await trx.raw(`PREPARE vg_explain AS ${sql.replace(/\?/g, () => `$${++n}`)}`);
      // EXPLAIN EXECUTE takes its arguments inline (a utility statement binds no parameters).
      const execute = trx.raw(`EXECUTE vg_explain(${bindings.map(() => "?").join(", ")})`, bindings as Knex.RawBinding[]).toQuery();
      const generic = await explain(trx, execute, []);
      await trx.raw(`DEALLOCATE vg_explain`);
      return { custom, generic };
    });
  }

  /**
   * A call of a set-returning PL/pgSQL batch function: its RETURN QUERY statement with the
   * call's arguments in place of the parameters, planned under the function's own settings.
   */
  async function functionBodyPlans(fn: string, bindings: readonly unknown[]): Promise<{ custom: PlanNode; generic: PlanNode }> {
    const { rows } = await stack.core.db.raw(
      `SELECT prosrc, proargnames, proconfig, (SELECT array_agg(format_type(t, NULL) ORDER BY n) FROM unnest(proargtypes) WITH ORDINALITY AS a(t, n)) AS types
         FROM pg_proc WHERE proname = ?`,
      [fn],
    );
    const p = (rows as { prosrc: string; proargnames: string[]; proconfig: string[] | null; types: string[] }[])[0]!;
    expect(p.proconfig, `${fn} plans once per connection`).to.include("plan_cache_mode=force_generic_plan");
    const body = /RETURN QUERY([\s\S]*);\s*END\s*$/i.exec(p.prosrc.trim())![1]!;
    const params: unknown[] = [];
    const names = p.types.map((_, i) => p.proargnames[i]!);
    const sql = body.replace(new RegExp(`\\b(${names.join("|")})\\b`, "g"), (name) => {
      const i = names.indexOf(name);
      params.push(bindings[i]);
      return `?::${p.types[i]}`;
    });
    return plans(sql, params, p.proconfig ?? []);
  }

  /**
   * EXPLAINs every captured statement (both plans; a batch function's body under its own
   * settings) and fails naming each one that scans a hot table; returns what was checked.
   */
  async function expectIndexedPlans(statements: Captured[]): Promise<string[]> {
    const checked: string[] = [];
    const offenders: string[] = [];
    for (const s of statements) {
      const fn = /\bFROM\s+(\w+_batch)\s*\(/i.exec(s.sql)?.[1];
      // vault_record_spend: two INSERTs (no reads) and the vault's UPDATE by its key, explained here.
      const spend = /vault_record_spend\(/.test(s.sql);
      const { custom, generic } = fn
        ? await functionBodyPlans(fn, s.bindings)
        : spend
          ? await plans(`UPDATE vaults v SET balance_cents = balance_cents - 1 WHERE v.id = ?`, [s.bindings[0]])
          : await plans(s.sql, s.bindings);
      const scans = [...seqScans(custom), ...seqScans(generic).map((x) => `${x} (generic plan)`)];
      checked.push(fn ?? s.sql.replace(/\s+/g, " ").slice(0, 80));
      if (scans.length > 0) offenders.push(`${scans.join(", ")} in: ${(fn ?? s.sql).replace(/\s+/g, " ").slice(0, 300)}`);
    }
    expect(offenders, offenders.join("\n")).to.deep.equal([]);
    return checked;
  }

  it("payments context (locked and group-committed), grant lookup, audit feed page, partner access batch and rate-limit hit: no sequential scan", async () => {
    const { child, token } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const kycUser = await createUserFor(stack, partner, ["kyc:read"]);
    const partnerToken = await mintPartnerToken(stack, partner, "kyc:read");
    await seed(partner.partnerId, child);
    await stack.clients.budgets.simulatePayment({ accessToken: token, payment: payment({ amountCents: 10n }) }); // warm up, outside the capture

    const statements = await capture(async () => {
      await stack.clients.budgets.simulatePayment({ accessToken: token, payment: payment({ amountCents: 10n }) });
      await stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment({ amountCents: 10n }) });
      await stack.clients.budgets.getBalance({ accessToken: await grantFor(stack, child) });
      const page = await stack.clients.budgets.listGrantAudit({ accessToken: token, limit: 10 });
      await stack.clients.budgets.listGrantAudit({ accessToken: token, limit: 10, cursor: page.nextCursor });
      await stack.clients.partnerResources.getKycStatus({ accessToken: partnerToken, userId: kycUser.userId });
      await stack.clients.grants.startSignIn({ email: `nobody-${randomBytes(4).toString("hex")}@example.test` });
      await createRateLimitStore(stack.core.db).hit(`explain:${randomBytes(4).toString("hex")}`, 10, 60, stack.clock());
    });

    const checked = await expectIndexedPlans(statements);
    // Each hot path was really among the statements checked.
    const saw = (re: RegExp) => expect(statements.some((s) => re.test(s.sql)), String(re)).to.equal(true);
    saw(/FOR UPDATE OF v/); // payments.initiate: the locked context
    saw(/unnest\([\s\S]*AS k\(grant_id, day_start/); // payments.simulate: the group-committed context
    saw(/FROM grants g JOIN users u ON u.id = g.user_id WHERE g.id = \?/); // grant lookup
    saw(/from "audit_records"/i); // audit feed page
    saw(/partner_access_batch/); // partner access batch
    saw(/INSERT INTO rate_limit_logs/); // rate-limit hit
    saw(/vault_record_spend\(/); // the spend totals and the payment's ledger transaction
    expect(checked.length).to.be.greaterThan(8);
  });

  it("token endpoints: code exchange and refresh (group-committed), a partner's client_credentials token: no sequential scan", async () => {
    const { child } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    await seed(partner.partnerId, child);
    const unseed = await seedTokens();
    try {
      await checkTokenEndpoints(partner);
    } finally {
      await unseed();
    }
  });

  async function checkTokenEndpoints(partner: Awaited<ReturnType<typeof createPartner>>) {
    const f = fixtures(stack);
    const user = await f.user();
    const client = await f.oauthClient("accounts:read");
    const { code, verifier } = await f.authorizationCode(user, client);
    const other = await f.clientGrant(user, client); // warms the client's secret check, outside the capture

    const statements = await capture(async () => {
      const exchanged = await stack.clients.grants.exchangeCode({ clientId: client.clientId, clientSecret: client.clientSecret, code, redirectUri: client.redirectUri, codeVerifier: verifier });
      await stack.clients.grants.refreshGrant({ refreshToken: exchanged.token!.refreshToken, clientId: client.clientId, clientSecret: client.clientSecret });
      await stack.clients.grants.refreshGrant({ refreshToken: other.refreshToken, clientId: client.clientId, clientSecret: client.clientSecret });
      await stack.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret, scope: "kyc:read" });
    });

    const checked = await expectIndexedPlans(statements);
    const saw = (re: RegExp) => expect(statements.some((s) => re.test(s.sql)), `${String(re)} among:\n${checked.join("\n")}`).to.equal(true);
    saw(/grant_exchange_batch/); // the exchange's fast path: code, grant and audit row in one statement
    saw(/grant_refresh_batch/); // the refresh's fast path: old grant, successor and audit row
    saw(/\bpartners\b/); // the client_credentials grant reads its partner
  }

  it("the pruner's batches find expired rows by index", async () => {
    const statements = await capture(() => stack.core.prune());
    const offenders: string[] = [];
    for (const s of statements) {
      const scans = seqScans(await explain(stack.core.db, s.sql, s.bindings));
      if (scans.length > 0) offenders.push(`${scans.join(", ")} in: ${s.sql.replace(/\s+/g, " ").slice(0, 200)}`);
    }
    expect(statements.length).to.be.at.least(7);
    expect(statements.map((s) => s.sql).join("\n")).to.include("DELETE FROM rate_limit_windows");
    expect(offenders, offenders.join("\n")).to.deep.equal([]);
  });
});
