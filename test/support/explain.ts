import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Knex } from "knex";
import type { TestStack } from "./stack.js";

/** Support for the EXPLAIN suites: hot tables seeded to size, the statements a call sends, and their plans. */

/** Tables that grow with users, grants, payments and traffic: a hot statement must never scan one. */
export const HOT_TABLES = new Set([
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
  "agent_principals",
  "budgets",
  "web_sessions",
  "signin_challenges",
  "partner_events",
  "treasury_batches",
  "treasury_executions",
  "ledger_entries",
  "user_wallets",
  "us_accounts",
]);

/** The most rows a scan of a hot table may expect to read when nothing above it limits the rows. */
export const MAX_UNLIMITED_ROWS = 100;

export interface PlanNode {
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
export function seqScans(node: PlanNode, out: string[] = [], limited = false): string[] {
  const table = node["Relation Name"];
  const type = node["Node Type"];
  if (table && HOT_TABLES.has(table)) {
    if (type === "Seq Scan") out.push(`Seq Scan on ${table}`);
    else if (/Scan$/.test(type) && !limited && (node["Plan Rows"] ?? 0) > MAX_UNLIMITED_ROWS)
      out.push(`${type} on ${table} expecting ${node["Plan Rows"]} rows, unlimited`);
  }
  for (const child of node.Plans ?? []) seqScans(child, out, limited || type === "Limit");
  return out;
}

export interface Captured {
  sql: string;
  bindings: unknown[];
}

/** One suite's seeding, capture and plan checks; `stack` is read at call time, `cleanup` runs after each test. */
export function explainKit(stack: () => TestStack) {
  // What a test seeded into tables other suites read or prune, deleted after it: the test
  // database is shared by the whole run (the pruner's test counts what one pass removes).
  const cleanups: (() => Promise<unknown>)[] = [];
  async function cleanup(): Promise<void> {
    for (const c of cleanups.splice(0).reverse()) await c();
  }

  async function seed(partnerId: string, child: { vaultId: string; agentPrincipalId: string; userId: string }) {
    const db = stack().core.db;
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
       SELECT gen_random_uuid(), ?, ?, ?, 'seed', 'seed-' || i, 'h', '0xabc0000000000000000000000000000000000001', 'base', 'USDC', 1, 'USD', 'completed', t, t
         FROM generate_series(1, 5000) i, LATERAL (SELECT now() - make_interval(hours => i) AS t) x`,
      [child.vaultId, child.userId, child.agentPrincipalId],
    );
    await db.raw(
      `INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
       SELECT 'seed', CASE WHEN i % 2 = 0 THEN 'agent:' || ? ELSE 'agent:seed-' || (i % 500) END, 'seed', 'success', '', '', now()
         FROM generate_series(1, 6000) i`,
      [child.agentPrincipalId],
    );
    // Seeded rows are never pending or due, so suites sharing this database never see a seeded
    // event to deliver or a seeded transfer in their books.
    const seeded = `SELECT id FROM users WHERE email LIKE 'seed-%-' || ? || '@example.test'`;
    await db.raw(
      `INSERT INTO budgets (id, parent_vault_id, user_id, grant_id, idempotency_key, params_hash, params, agent_principal_id, vault_id, status, created_at, updated_at)
       SELECT gen_random_uuid(), a.vault_id, a.user_id, 'seed', 'seed-' || a.id, 'h', '{}', a.id, a.vault_id, 'active', now(), now()
         FROM agent_principals a WHERE a.user_id IN (${seeded})`,
      [tag],
    );
    await db.raw(
      `INSERT INTO web_sessions (id, token_hash, user_id, created_at, expires_at) SELECT gen_random_uuid(), md5(random()::text || id::text), id, now(), now() + interval '1 day' FROM (${seeded}) u`,
      [tag],
    );
    await db.raw(
      `INSERT INTO signin_challenges (id, user_id, purpose, code_hash, created_at, expires_at) SELECT gen_random_uuid(), id, 'sign_in', 'x', now(), now() + interval '10 minutes' FROM (${seeded}) u`,
      [tag],
    );
    await db.raw(`INSERT INTO user_wallets (user_id, chain, address, created_at) SELECT id, 'base', '0x' || md5(id::text), now() FROM (${seeded}) u`, [tag]);
    await db.raw(
      `INSERT INTO us_accounts (user_id, bank_name, routing_number, account_number, account_type, beneficiary_name, created_at)
       SELECT id, 'Seed', '000000000', '0', 'checking', 'Seed', now() FROM (${seeded}) u`,
      [tag],
    );
    await db.raw(
      `INSERT INTO ledger_entries (id, user_id, direction, amount_cents, currency, status, created_at, updated_at)
       SELECT gen_random_uuid(), id, 'credit', 1, 'USD', 'pending', now(), now() FROM (${seeded}) u`,
      [tag],
    );
    await db.raw(
      `INSERT INTO partner_events (id, partner_id, type, data, created_at, delivery_state, attempts, next_attempt_at, delivered_at)
       SELECT gen_random_uuid(), ?, 'kyc.status_changed', '{}', now(), 'delivered', 1, now(), now() FROM generate_series(1, 5000) i`,
      [partnerId],
    );
    await db.raw(
      `INSERT INTO treasury_batches (id, partner_id, idempotency_key, request_hash, response, created_at)
       SELECT gen_random_uuid(), ?, 'seed-' || ? || '-' || i, 'h', '\\x00', now() FROM generate_series(1, 4000) i`,
      [partnerId, tag],
    );
    await db.raw(
      `INSERT INTO treasury_executions (partner_id, execution_id, payout_id, batch_id, recipient_user_id, payer_entity_id, amount_cents, currency, reference, executed_at)
       SELECT ?, 'seed-' || ? || '-' || n, 'seed-' || ? || '-' || n, gen_random_uuid(), id, gen_random_uuid(), 1, 'USD', '', now()
         FROM (SELECT id, row_number() OVER () AS n FROM (${seeded}) u) r`,
      [partnerId, tag, tag, tag],
    );
    await db.raw(
      `INSERT INTO rate_limit_logs (key, hits, allowed, expires_at) SELECT 'seed:' || ? || ':' || i, ARRAY[now()], true, now() + interval '1 minute' FROM generate_series(1, 4000) i`,
      [tag],
    );
    await db.raw(
      `INSERT INTO rate_limit_windows (key, window_start, count) SELECT 'seed:' || ? || ':' || i, date_trunc('minute', now()), 1 FROM generate_series(1, 4000) i`,
      [tag],
    );
    for (const t of HOT_TABLES) await db.raw(`ANALYZE ${t}`);
    cleanups.push(async () => {
      await db.raw(`DELETE FROM rate_limit_logs WHERE key LIKE 'seed:' || ? || ':%'`, [tag]);
      await db.raw(`DELETE FROM rate_limit_windows WHERE key LIKE 'seed:' || ? || ':%'`, [tag]);
      await db.raw(`DELETE FROM signin_challenges WHERE user_id IN (${seeded})`, [tag]);
      await db.raw(`DELETE FROM web_sessions WHERE user_id IN (${seeded})`, [tag]);
      await db.raw(`DELETE FROM partner_events WHERE partner_id = ?`, [partnerId]);
    });
  }

  /**
   * The token endpoints' tables at size (clients, partners, codes, refresh tokens). Clients,
   * partners and codes are deleted afterwards because other suites page through every partner.
   */
  async function seedTokens(): Promise<void> {
    const db = stack().core.db;
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
    cleanups.push(async () => {
      await db.raw(`DELETE FROM authorization_codes WHERE client_id = 'seed-' || ? || '-1'`, [tag]);
      await db.raw(`DELETE FROM oauth_clients WHERE client_id LIKE 'seed-' || ? || '-%'`, [tag]);
      await db.raw(`DELETE FROM partners WHERE client_id LIKE 'seed-' || ? || '-%'`, [tag]);
    });
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
    stack().core.db.on("query", listener);
    try {
      await work();
    } finally {
      stack().core.db.off("query", listener);
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
    return stack().core.db.transaction(async (trx) => {
      for (const setting of settings) {
        const [k, v] = setting.split("=");
        await trx.raw(`SELECT set_config(?, ?, true)`, [k, v]);
      }
      const custom = await explain(trx, sql, bindings);
      await trx.raw(`SET LOCAL plan_cache_mode = force_generic_plan`);
      let n = 0;
      await trx.raw(`PREPARE vg_explain AS ${sql.replace(/\?/g, () => `$${++n}`)}`);
      // EXPLAIN EXECUTE takes its arguments inline (a utility statement binds no parameters);
      // bytes as bytea's text form (knex would inline a bit string).
      const inline = bindings.map((b) => (Buffer.isBuffer(b) ? `\\x${b.toString("hex")}` : b));
      const execute = trx.raw(`EXECUTE vg_explain(${inline.map(() => "?").join(", ")})`, inline as Knex.RawBinding[]).toQuery();
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
    const { rows } = await stack().core.db.raw(
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
   * EXPLAINs every captured statement and fails naming each that scans a hot table. Each of
   * `including` must match a capture, so a hot path that stopped running cannot pass unchecked.
   */
  async function expectIndexedPlans(statements: Captured[], including: RegExp[]): Promise<string[]> {
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
    for (const re of including) {
      expect(
        statements.some((s) => re.test(s.sql)),
        `${String(re)} among:\n${checked.join("\n")}`,
      ).to.equal(true);
    }
    return checked;
  }

  return { cleanups, cleanup, seed, seedTokens, capture, explain, expectIndexedPlans };
}
