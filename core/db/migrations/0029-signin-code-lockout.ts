import type { Knex } from "knex";

/**
 * Sign-in codes are limited per account, and now stored keyed-hashed (outbox encrypted) under a
 * key outside the database; older challenges and messages are deleted (a new code is asked for).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE signin_challenges ADD COLUMN account text`);
  await knex.raw(`DELETE FROM signin_challenges WHERE consumed_at IS NULL`);
  await knex.raw(`DELETE FROM dev_outbox`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE signin_challenges DROP COLUMN account`);
}
