import type { Knex } from "knex";

/** A consent withdrawal or a deactivation drops one user's events: found by user, not by walking a partner's feed. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX partner_events_user ON partner_events ((lower(data->>'user_id')), partner_id)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX partner_events_user`);
}
