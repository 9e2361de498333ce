import type { Knex } from "knex";

/**
 * Sign-in codes are limited per account (the normalised e-mail address a code was sent
 * to), so each challenge records it. Codes are now kept as a keyed hash and the dev outbox
 * encrypted, both under a key outside the database: the challenges and messages written
 * before (plain SHA-256 of a six-digit code, and the code in clear) are deleted; a person
 * mid-sign-in asks for a new code.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE signin_challenges ADD COLUMN account text`);
  await knex.raw(`DELETE FROM signin_challenges WHERE consumed_at IS NULL`);
  await knex.raw(`DELETE FROM dev_outbox`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE signin_challenges DROP COLUMN account`);
}
