import type { Knex } from "knex";

/** The settlement worker walks the unsigned pending payments by id, looking for closes and revocations that stop them. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX settlement_payments_unsigned ON settlement_payments (payment_id) WHERE status = 'pending' AND nonce IS NULL`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX settlement_payments_unsigned`);
}
