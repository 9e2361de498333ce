import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * A payout is its own transfer entry: the recipient's transfers feed reads payouts from
 * treasury_executions, so a batch no longer writes a copy of each paid item into
 * ledger_entries (500 rows, three indexes and a foreign key check each, for a 500-item
 * batch).
 *
 * An execution written from this version on carries the feed position a transfer entry
 * has: `seq` from the sequence of ledger_entries.seq (one sequence, so a position names
 * one row of either table) and `xid`, the id of the writing transaction (migration 0014).
 * The batch's INSERT sets both; there is no column default, so a replica of the version
 * before (during a rollout) still writes its executions without them, next to the
 * transfer entries it writes for them, and nothing is counted twice.
 *
 * Executions written before this migration keep seq and xid NULL and stay out of the
 * feed: those paid since payouts credit their recipients already have their entry in
 * ledger_entries (same id, same position), and older ones never were transfers.
 *
 * The feed index holds only the rows in the feed.
 *
 * Event data is compressed with lz4 where the server has it (PostgreSQL's default, pglz,
 * is much slower on a large batch's payout.executed event and stores it larger). It
 * applies to rows written from now on; older rows are read as they were stored. PGlite
 * has no lz4 and keeps pglz.
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
