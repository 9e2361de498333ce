import type { Knex } from "knex";

/** The network a hot wallet's nonces and payments are on, recorded by the first core that reached its node. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE settlement_nonces ADD COLUMN chain_id bigint`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE settlement_nonces DROP COLUMN chain_id`);
}
