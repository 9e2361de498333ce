import type { Knex } from "knex";

/** The kill switch discards a user's unexchanged authorization codes: found by user, not by a scan. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX authorization_codes_user_unused ON authorization_codes (user_id) WHERE consumed_at IS NULL`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX authorization_codes_user_unused`);
}
