import type { Knex } from "knex";

/** When a reorg took back a payment's completed transfer: such a payment is sent again, never cancelled for its expiry. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE settlement_payments ADD COLUMN reorged_at timestamptz`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE settlement_payments DROP COLUMN reorged_at`);
}
