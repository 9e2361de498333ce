import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Payouts are read from treasury_executions by the transfers feed instead of being copied into
 * ledger_entries; no column default, so an older replica mid-rollout writes no feed position.
 * Event data uses lz4 where available (pglz is much slower on large payout events).
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE treasury_executions ADD COLUMN seq bigint;
    ALTER TABLE treasury_executions ADD COLUMN xid xid8;
    ALTER TABLE treasury_executions ADD CONSTRAINT treasury_executions_feed_position CHECK ((seq IS NULL) = (xid IS NULL));
    CREATE INDEX treasury_executions_transfers_feed ON treasury_executions (recipient_user_id, xid, seq) WHERE seq IS NOT NULL;
    COMMENT ON SEQUENCE ledger_entries_seq_seq IS 'Feed positions of transfer entries and of the payouts in treasury_executions.seq';
  `,
  );
  await knex.raw(LZ4_EVENT_DATA);
}

const LZ4_EVENT_DATA = `
DO $$ BEGIN
  ALTER TABLE partner_events ALTER COLUMN data SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
  NULL;
END $$`;

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE partner_events ALTER COLUMN data SET COMPRESSION DEFAULT;
    COMMENT ON SEQUENCE ledger_entries_seq_seq IS NULL;
    DROP INDEX treasury_executions_transfers_feed;
    ALTER TABLE treasury_executions DROP CONSTRAINT treasury_executions_feed_position;
    ALTER TABLE treasury_executions DROP COLUMN xid;
    ALTER TABLE treasury_executions DROP COLUMN seq;
  `,
  );
}
