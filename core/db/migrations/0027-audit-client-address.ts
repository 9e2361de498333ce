import type { Knex } from "knex";

/**
 * The client address a gateway vouched for on an audit record ("" otherwise). A default on a new
 * column rewrites no row, so the append-only trigger is not involved.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE audit_records ADD COLUMN client_address text NOT NULL DEFAULT ''`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE audit_records DROP COLUMN client_address`);
}
