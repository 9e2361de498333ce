import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** When a partner's endpoint answered 410 Gone: nothing is sent to it until its URL is set again. */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE partners ADD COLUMN webhook_gone_at timestamptz;`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE partners DROP COLUMN webhook_gone_at;`);
}
