import type { Knex } from "knex";

/**
 * Partner resource rate windows (one row per partner, operation and minute) are pruned by
 * the pruner (core/maintenance/pruner.ts) in bounded batches, found by the window's start.
 * Before, every thousandth access check deleted old windows in one unbounded statement
 * that scanned the whole table.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`CREATE INDEX rate_limit_windows_start ON rate_limit_windows (window_start)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX rate_limit_windows_start`);
}
