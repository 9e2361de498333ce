import type { Knex } from "knex";

/** Rate windows are pruned in bounded batches by their start instead of one unbounded delete. */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX rate_limit_windows_start ON rate_limit_windows (window_start)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX rate_limit_windows_start`);
}
