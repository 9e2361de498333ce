import type { Knex } from "knex";
import { isEmbedded, type Db } from "./knex.js";
import * as m0001 from "./migrations/0001-platform.js";
import * as m0002 from "./migrations/0002-identity.js";
import * as m0003 from "./migrations/0003-partner-resources.js";
import * as m0004 from "./migrations/0004-treasury.js";
import * as m0005 from "./migrations/0005-grants.js";
import * as m0006 from "./migrations/0006-budgets.js";
import * as m0007 from "./migrations/0007-grants-perf.js";
import * as m0008 from "./migrations/0008-partner-access-batch.js";
import * as m0010 from "./migrations/0010-approval-decline.js";
import * as m0011 from "./migrations/0011-token-batch-functions.js";
import * as m0012 from "./migrations/0012-signing-key-lifecycle.js";
import * as m0013 from "./migrations/0013-refresh-salt.js";
import * as m0014 from "./migrations/0014-feed-horizon.js";
import * as m0015 from "./migrations/0015-webhook-leases.js";
import * as m0016 from "./migrations/0016-grant-audiences.js";
import * as m0017 from "./migrations/0017-client-metadata-documents.js";
import * as m0018 from "./migrations/0018-vault-spend-totals.js";
import * as m0019 from "./migrations/0019-pruning.js";
import * as m0020 from "./migrations/0020-ledger.js";
import * as m0021 from "./migrations/0021-budget-life.js";
import * as m0022 from "./migrations/0022-consents-by-user.js";
import * as m0023 from "./migrations/0023-payout-transfers.js";
import * as m0024 from "./migrations/0024-generic-batch-plans.js";
import * as m0025 from "./migrations/0025-rate-window-pruning.js";
import * as m0026 from "./migrations/0026-owner-lookups.js";
import * as m0027 from "./migrations/0027-audit-client-address.js";
import * as m0028 from "./migrations/0028-dead-budget-vaults.js";
import * as m0029 from "./migrations/0029-signin-code-lockout.js";
import * as m0030 from "./migrations/0030-settlement.js";
import * as m0031 from "./migrations/0031-settlement-ledger.js";
import * as m0033 from "./migrations/0033-mail-outbox.js";
import * as m0034 from "./migrations/0034-identity-links.js";
import * as m0035 from "./migrations/0035-passkeys.js";
import * as m0036 from "./migrations/0036-audit-address-in-batches.js";
import * as m0037 from "./migrations/0037-codes-by-user.js";
import * as m0038 from "./migrations/0038-events-age-out.js";
import * as m0039 from "./migrations/0039-refresh-scopes.js";
import * as m0040 from "./migrations/0040-open-payments-by-user.js";
import * as m0041 from "./migrations/0041-partner-events-and-secret-overlap.js";
import * as m0042 from "./migrations/0042-settlement-chain-ids.js";
import * as m0043 from "./migrations/0043-public-clients.js";
import * as m0044 from "./migrations/0044-canonical-emails.js";
import * as m0045 from "./migrations/0045-budget-endings.js";
import * as m0046 from "./migrations/0046-decline-revoked-open-payments.js";
import * as m0047 from "./migrations/0047-agents-by-user.js";
import * as m0048 from "./migrations/0048-mail-expiry.js";
import * as m0049 from "./migrations/0049-payout-transfer-ids.js";
import * as m0050 from "./migrations/0050-evm-recipients-lower-case.js";
import * as m0051 from "./migrations/0051-sign-in-by-user.js";
import * as m0052 from "./migrations/0052-budget-keeps-funds.js";
import * as m0053 from "./migrations/0053-unsigned-payments.js";
import * as m0054 from "./migrations/0054-session-end-reason.js";
import * as m0055 from "./migrations/0055-mail-failed.js";
import * as m0056 from "./migrations/0056-settlement-reorged.js";
import * as m0057 from "./migrations/0057-webhook-gone.js";
import * as m0058 from "./migrations/0058-webhook-generation.js";
import * as m0059 from "./migrations/0059-stranded-funds-order.js";

interface Migration {
  name: string;
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}

/** Every migration in order. Append only; never edit a migration that has shipped. */
const migrations: Migration[] = [
  { name: "0001-platform", ...m0001 },
  { name: "0002-identity", ...m0002 },
  { name: "0003-partner-resources", ...m0003 },
  { name: "0004-treasury", ...m0004 },
  { name: "0005-grants", ...m0005 },
  { name: "0006-budgets", ...m0006 },
  { name: "0007-grants-perf", ...m0007 },
  { name: "0008-partner-access-batch", ...m0008 },
  { name: "0010-approval-decline", ...m0010 },
  { name: "0011-token-batch-functions", ...m0011 },
  { name: "0012-signing-key-lifecycle", ...m0012 },
  { name: "0013-refresh-salt", ...m0013 },
  { name: "0014-feed-horizon", ...m0014 },
  { name: "0015-webhook-leases", ...m0015 },
  { name: "0016-grant-audiences", ...m0016 },
  { name: "0017-client-metadata-documents", ...m0017 },
  { name: "0018-vault-spend-totals", ...m0018 },
  { name: "0019-pruning", ...m0019 },
  { name: "0020-ledger", ...m0020 },
  { name: "0021-budget-life", ...m0021 },
  { name: "0022-consents-by-user", ...m0022 },
  { name: "0023-payout-transfers", ...m0023 },
  { name: "0024-generic-batch-plans", ...m0024 },
  { name: "0025-rate-window-pruning", ...m0025 },
  { name: "0026-owner-lookups", ...m0026 },
  { name: "0027-audit-client-address", ...m0027 },
  { name: "0028-dead-budget-vaults", ...m0028 },
  { name: "0029-signin-code-lockout", ...m0029 },
  { name: "0030-settlement", ...m0030 },
  { name: "0031-settlement-ledger", ...m0031 },
  { name: "0033-mail-outbox", ...m0033 },
  { name: "0034-identity-links", ...m0034 },
  { name: "0035-passkeys", ...m0035 },
  { name: "0036-audit-address-in-batches", ...m0036 },
  { name: "0037-codes-by-user", ...m0037 },
  { name: "0038-events-age-out", ...m0038 },
  { name: "0039-refresh-scopes", ...m0039 },
  { name: "0040-open-payments-by-user", ...m0040 },
  { name: "0041-partner-events-and-secret-overlap", ...m0041 },
  { name: "0042-settlement-chain-ids", ...m0042 },
  { name: "0043-public-clients", ...m0043 },
  { name: "0044-canonical-emails", ...m0044 },
  { name: "0045-budget-endings", ...m0045 },
  { name: "0046-decline-revoked-open-payments", ...m0046 },
  { name: "0047-agents-by-user", ...m0047 },
  { name: "0048-mail-expiry", ...m0048 },
  { name: "0049-payout-transfer-ids", ...m0049 },
  { name: "0050-evm-recipients-lower-case", ...m0050 },
  { name: "0051-sign-in-by-user", ...m0051 },
  { name: "0052-budget-keeps-funds", ...m0052 },
  { name: "0053-unsigned-payments", ...m0053 },
  { name: "0054-session-end-reason", ...m0054 },
  { name: "0055-mail-failed", ...m0055 },
  { name: "0056-settlement-reorged", ...m0056 },
  { name: "0057-webhook-gone", ...m0057 },
  { name: "0058-webhook-generation", ...m0058 },
  { name: "0059-stranded-funds-order", ...m0059 },
];

/** A migration that threw, by name: knex says which only in a log line. `cause` is what it threw. */
export class MigrationFailed extends Error {
  override readonly name = "MigrationFailed";
  constructor(
    readonly migration: string,
    override readonly cause: unknown,
  ) {
    super(`migration ${migration} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

const source: Knex.MigrationSource<Migration> = {
  getMigrations: async () => migrations,
  getMigrationName: (m) => m.name,
  // Whatever else a migration states (a config) stays with it.
  getMigration: async (m) => ({
    ...m,
    up: async (knex: Knex) => {
      try {
        await m.up(knex);
      } catch (err) {
        throw new MigrationFailed(m.name, err);
      }
    },
  }),
};

// Migrations keep the previous version working, so a replica of it restarting (or rolled back to)
// mid-rollout starts against a database a newer one migrated, ignoring the rows it does not know.
const config = { migrationSource: source, tableName: "knex_migrations", disableMigrationsListValidation: true };

/** Arbitrary constant naming the migration advisory lock. */
const MIGRATION_LOCK_KEY = 7_370_423_001;

/**
 * Applies pending migrations. On Postgres, replicas starting together queue on a
 * session advisory lock held on a dedicated connection, so knex's own lock table is
 * never contended (it fails instead of waiting). PGlite is single-connection.
 */
export async function migrateLatest(db: Db): Promise<string[]> {
  if (isEmbedded(db)) return latest(db);
  const conn = await db.client.acquireConnection();
  try {
    await db.raw(`SELECT pg_advisory_lock(?)`, [MIGRATION_LOCK_KEY]).connection(conn);
    try {
      return await latest(db);
    } finally {
      await db.raw(`SELECT pg_advisory_unlock(?)`, [MIGRATION_LOCK_KEY]).connection(conn);
    }
  } finally {
    await db.client.releaseConnection(conn);
  }
}

async function latest(db: Db): Promise<string[]> {
  const [, applied] = (await db.migrate.latest(config)) as [number, string[]];
  return applied;
}

/** True when every known migration has been applied. */
export async function migrationsCurrent(db: Db): Promise<boolean> {
  const [, pending] = (await db.migrate.list(config)) as [unknown[], unknown[]];
  return pending.length === 0;
}
