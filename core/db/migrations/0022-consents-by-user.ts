import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Consents by user: a payout batch (and a recorded transfer) finds every partner whose
 * consent of each recipient includes transfers:read, to send it transfer.settled. The
 * primary key leads with the partner, so without this index that lookup read the whole
 * table.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `CREATE INDEX consents_user ON consents (user_id)`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP INDEX consents_user`);
}
