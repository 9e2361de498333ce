import type { Knex } from "knex";

/**
 * Whether an ended budget keeps its money (closed with keep_funds) or sent it up (a sweeping close
 * or decline, or a sweep since): a refund that arrives later follows the same choice. Budgets ended
 * before this migration count as keeping, so their late refunds stay in their vault, as they did.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE budgets ADD COLUMN keeps_funds boolean NOT NULL DEFAULT true`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE budgets DROP COLUMN keeps_funds`);
}
