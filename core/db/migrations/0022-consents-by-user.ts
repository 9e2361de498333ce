import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** A payout finds the partners consented to by each recipient; the primary key leads with the partner. */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `CREATE INDEX consents_user ON consents (user_id)`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP INDEX consents_user`);
}
