import pg from "pg";
import { fmt } from "./support.js";

// The grown-data bench's seed: the database a service has after years, grown by SQL.

/** What the seed needs of a started stack: its database and its fixtures. */
export interface SeedTarget {
  dbUrl: string;
  partnerId: string;
  userId: string;
  budgetVaultId: string;
}

export const SCALE = Number(process.env.BENCH_GROWN_SCALE ?? 1); // BENCH_GROWN_SCALE=0.1 for a quick try
export const AUDIT_ROWS = Math.round(1_000_000 * SCALE);
export const USERS = Math.round(50_000 * SCALE);
export const GRANTS_PER_USER = 3;
export const PAYMENT_VAULTS = 10;
export const PAYMENTS_PER_VAULT = Math.round(10_000 * SCALE);
export const BENCH_VAULT_PAYMENTS = Math.round(100_000 * SCALE);

/**
 * SQL for a UUIDv7 made at `at`, as lib/uuidv7.ts makes one: the product's ids grow at an
 * index's right edge, and random ones would split pages our databases never split.
 */
export const seedUuidv7 = (at: string) =>
  `overlay(gen_random_uuid()::text PLACING regexp_replace(lpad(to_hex(floor(extract(epoch FROM ${at}) * 1000)::bigint), 12, '0'), '^(.{8})(.{4})$', '\\1-\\2-7') FROM 1 FOR 15)`;

/** Grows `stack`'s database by SQL around its fixtures. */
export async function seed(stack: SeedTarget): Promise<void> {
  const client = new pg.Client({ connectionString: stack.dbUrl });
  await client.connect();
  const t0 = performance.now();
  const step = async (label: string, sql: string, params: unknown[] = []) => {
    const t = performance.now();
    const r = await client.query(sql, params);
    console.log(`  seed: ${label}: ${r.rowCount ?? 0} rows, ${fmt((performance.now() - t) / 1000, 1)} s`);
  };
  try {
    await client.query(
      "CREATE TEMP TABLE seed_users AS SELECT g AS n, gen_random_uuid() AS user_id, gen_random_uuid() AS vault_id, gen_random_uuid() AS agent_id FROM generate_series(1, $1::int) g",
      [USERS],
    );
    await step(
      "users",
      "INSERT INTO users (id, email, status, created_at) SELECT user_id, 'seed-' || n || '@example.test', 'active', now() - (n % 700) * interval '1 day' FROM seed_users",
    );
    await step(
      "vaults",
      "INSERT INTO vaults (id, owner_user_id, balance_cents, currency, created_at) SELECT vault_id, user_id, 10000, 'USD', now() - (n % 700) * interval '1 day' FROM seed_users",
    );
    await step(
      "agent principals",
      "INSERT INTO agent_principals (id, user_id, vault_id, display_name, created_at) SELECT agent_id, user_id, vault_id, 'seed agent', now() - (n % 700) * interval '1 day' FROM seed_users",
    );
    await step("partner users", "INSERT INTO partner_users (partner_id, user_id, created_at) SELECT $1, user_id, now() FROM seed_users", [stack.partnerId]);
    await step(
      "consents (the bench user's scopes)",
      "INSERT INTO consents (partner_id, user_id, scopes, updated_at) SELECT $1, s.user_id, c.scopes, now() FROM seed_users s, (SELECT scopes FROM consents WHERE partner_id = $1 AND user_id = $2) c",
      [stack.partnerId, stack.userId],
    );
    await step(
      "KYC",
      "INSERT INTO user_kyc (user_id, status, provider, updated_at) SELECT user_id, CASE WHEN n % 3 = 0 THEN 'pending' ELSE 'approved' END, 'sandbox', now() FROM seed_users",
    );
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
    for (const [i, r] of (rows as { user_id: string; vault_id: string }[]).entries())
      await payments(r.vault_id, r.user_id, PAYMENTS_PER_VAULT, `payments, vault ${i + 1} of ${PAYMENT_VAULTS}`);
    await payments(stack.budgetVaultId, stack.userId, BENCH_VAULT_PAYMENTS, "payments of the bench's budget vault");
    // Running totals on vaults, where the schema has them: the seeded history is older
    // than a day, so it adds to the lifetime total only.
    const cols = (await client.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'vaults' AND column_name LIKE 'spent%'")).rows.map(
      (r: { column_name: string }) => r.column_name,
    );
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
