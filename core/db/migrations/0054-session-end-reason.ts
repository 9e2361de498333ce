import type { Knex } from "knex";

/**
 * Why a web session ended: only a sign-out may be repeated for a handoff to the other hosts; a
 * session replaced by a new sign-in or ended by an account change hands nothing off.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE web_sessions ADD COLUMN end_reason text CHECK (end_reason IN ('signed_out', 'replaced', 'account_change'))`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE web_sessions DROP COLUMN end_reason`);
}
