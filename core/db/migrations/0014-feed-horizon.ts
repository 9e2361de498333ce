import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Change feeds read up to the commit horizon (core/paging.ts, "Feed positions").
 *
 * A sequence number is taken at insert, not at commit, so a transaction that took seq 311
 * and commits after seq 312 was read made 311 invisible to any reader already past 312.
 * Every feed row now records the id of the transaction that wrote it (`xid`), feeds are
 * ordered by (xid, seq), and a reader returns only rows whose xid is below the oldest
 * transaction still running (pg_snapshot_xmin of its snapshot): every row that could still
 * commit sorts after everything returned.
 *
 * Existing rows get xid 0 (a constant default: no table rewrite, and no UPDATE, which
 * audit_records refuses); they keep their seq order, before every new row. The column
 * default then becomes the writing transaction's id, so every writer, including the SQL
 * batch functions of 0008, 0011 and 0013, fills it without change.
 *
 * The per-feed indexes make each page one index range scan: audit by actor (agent feed,
 * filtered operator list) and in full (unfiltered operator list and tail), events by
 * partner, ledger by user. The (…, seq) indexes they replace had no other reader.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE audit_records ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
    ALTER TABLE audit_records ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
    CREATE INDEX audit_records_feed ON audit_records (xid, seq);
    CREATE INDEX audit_records_actor_feed ON audit_records (actor, xid, seq);

    ALTER TABLE partner_events ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
    ALTER TABLE partner_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
    CREATE INDEX partner_events_partner_feed ON partner_events (partner_id, xid, seq);
    DROP INDEX partner_events_partner_seq;

    ALTER TABLE ledger_entries ADD COLUMN xid xid8 NOT NULL DEFAULT '0';
    ALTER TABLE ledger_entries ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
    CREATE INDEX ledger_entries_user_feed ON ledger_entries (user_id, xid, seq);
    DROP INDEX ledger_entries_user_seq;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX ledger_entries_user_seq ON ledger_entries (user_id, seq);
    DROP INDEX ledger_entries_user_feed;
    ALTER TABLE ledger_entries DROP COLUMN xid;

    CREATE INDEX partner_events_partner_seq ON partner_events (partner_id, seq);
    DROP INDEX partner_events_partner_feed;
    ALTER TABLE partner_events DROP COLUMN xid;

    DROP INDEX audit_records_actor_feed;
    DROP INDEX audit_records_feed;
    ALTER TABLE audit_records DROP COLUMN xid;
  `,
  );
}
