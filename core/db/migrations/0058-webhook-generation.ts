import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Counts every SetWebhook of a partner: a delivery remembers the count it was leased under, so a 410 answered
 * to a request sent before the URL was set again (even to the same string) pauses nothing.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE partners ADD COLUMN webhook_generation integer NOT NULL DEFAULT 0;`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE partners DROP COLUMN webhook_generation;`);
}
