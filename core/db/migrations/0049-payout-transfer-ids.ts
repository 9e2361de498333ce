import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** A payout's transfer id as stored when it executes; null for payouts written before, which keep their derived id. */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE treasury_executions ADD COLUMN transfer_id uuid;`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `ALTER TABLE treasury_executions DROP COLUMN transfer_id;`);
}
