import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** Closed budgets in the order the operator's stranded-funds pages walk them, so a page reads only its own rows. */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `CREATE INDEX budgets_closed_order ON budgets (closed_at, vault_id) WHERE status = 'closed';`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP INDEX budgets_closed_order;`);
}
