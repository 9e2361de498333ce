import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * The batch functions use a generic plan: a custom plan looked cheaper so each batch re-planned,
 * yet every statement finds rows by key (the hot-statement EXPLAIN test checks generic plans too).
 */
const FUNCTIONS = ["grant_exchange_batch", "grant_refresh_batch", "partner_access_batch"];

export async function up(knex: Knex): Promise<void> {
  await runScript(knex, FUNCTIONS.map((fn) => `ALTER FUNCTION ${fn} SET plan_cache_mode = force_generic_plan;`).join("\n"));
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, FUNCTIONS.map((fn) => `ALTER FUNCTION ${fn} RESET plan_cache_mode;`).join("\n"));
}
