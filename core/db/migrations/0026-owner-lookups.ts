import type { Knex } from "knex";

/**
 * A vault's newest payments and a budget by its agent principal, by index: before, each read
 * a vault's whole payment history or scanned every budget.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX agent_payments_vault_recent ON agent_payments (vault_id, created_at DESC, id DESC)`);
  await knex.raw(`CREATE INDEX budgets_agent ON budgets (agent_principal_id)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX budgets_agent`);
  await knex.raw(`DROP INDEX agent_payments_vault_recent`);
}
