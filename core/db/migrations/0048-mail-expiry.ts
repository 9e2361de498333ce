import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** A message carrying a one-time code expires with it; null (notices, and rows queued before) never does. */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE mail_outbox ADD COLUMN expires_at timestamptz;`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE mail_outbox DROP COLUMN expires_at;`);
}
