import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * The group-committed batch functions plan their statement once per connection.
 *
 * PL/pgSQL caches a function's statement, but under the default plan_cache_mode it keeps
 * choosing a custom plan for the token functions (the arrays' lengths make a custom plan
 * look cheaper), so every batch planned its statement anew. A generic plan is the same plan, since each
 * statement finds its rows by key (and enable_seqscan is off in each function); the
 * hot-statement EXPLAIN test checks the generic plans too.
 */
const FUNCTIONS = ["grant_exchange_batch", "grant_refresh_batch", "partner_access_batch"];

export async function up(knex: Knex): Promise<void> {
  await runScript(knex, FUNCTIONS.map((fn) => `ALTER FUNCTION ${fn} SET plan_cache_mode = force_generic_plan;`).join("\n"));
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, FUNCTIONS.map((fn) => `ALTER FUNCTION ${fn} RESET plan_cache_mode;`).join("\n"));
}
