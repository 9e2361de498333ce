import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Feeds order by (writing xid, seq) and read only below the oldest running transaction, so a row
 * whose seq was taken early but committed late is never skipped (see core/paging.ts).
 * Old rows get xid 0: a constant default rewrites nothing, and audit rows refuse UPDATE.
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
