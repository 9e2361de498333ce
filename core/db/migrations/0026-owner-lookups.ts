import type { Knex } from "knex";

/**
 * Lookups an owner's pages and a budget's decisions make, by index instead of a scan of
 * every row ever written:
 * - a vault's newest payments (the money view reads ten per vault): before, the only index
 *   holding every payment of a vault was the idempotency key's, so each vault's whole
 *   history was read and sorted;
 * - a budget by its agent principal (activating or declining a draft): budgets had no
 *   index on it, so each decision scanned every budget.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX agent_payments_vault_recent ON agent_payments (vault_id, created_at DESC, id DESC)`);
  await knex.raw(`CREATE INDEX budgets_agent ON budgets (agent_principal_id)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX budgets_agent`);
  await knex.raw(`DROP INDEX agent_payments_vault_recent`);
}
