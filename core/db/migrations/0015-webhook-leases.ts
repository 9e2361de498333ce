import type { Knex } from "knex";

/**
 * Webhook delivery lanes (docs/reference/partner-api.md, "Events and webhooks").
 *
 * One row per partner whose events a delivery worker is working through right now: the
 * worker that holds the row (its lease_token, until leased_until) is the only one that
 * sends that partner's events, one at a time in sequence order, and it renews the lease
 * before every request. A worker that dies leaves a lease that simply runs out; a worker
 * that finishes deletes its row. Rows are transient, so there is no foreign key: taking a
 * lane never waits on a lock of the partners row.
 *
 * Each event is fenced by its own attempt counter (partner_events.attempts): a worker
 * records the result of an attempt only if the counter is still the one it leased.
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
