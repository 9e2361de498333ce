import type { Knex } from "knex";

/**
 * Webhook delivery lanes: one leased row per partner so one worker sends its events in order.
 * Rows are transient, so no foreign key (taking a lane never waits on the partners row lock).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE webhook_lanes (
      partner_id    uuid PRIMARY KEY,
      lease_token   uuid NOT NULL,
      leased_until  timestamptz NOT NULL
    )
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE webhook_lanes`);
}
