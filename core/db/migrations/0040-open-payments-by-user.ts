import type { Knex } from "knex";

/** A user's payments still open (waiting for approval, or approved and not repeated): the kill switch declines them. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX agent_payments_user_open ON agent_payments (user_id) WHERE status IN ('pending_step_up', 'approved')`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX agent_payments_user_open`);
}
