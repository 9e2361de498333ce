import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Token endpoint throughput: a refresh supersedes its grant by changing
 * state, refresh_used_at, successor_id and state_changed_at. `state` was in the
 * grants_user index, so every rotation was a non-HOT update that wrote a new entry
 * into all five indexes of grants. Indexing user_id alone still serves every lookup
 * by user (revokeAllOfUser filters state on the few rows of one user), and free space
 * on each page lets the superseded row version stay on its page (a HOT update).
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX grants_user_id ON grants (user_id);
    DROP INDEX grants_user;
    ALTER TABLE grants SET (fillfactor = 70);
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX grants_user ON grants (user_id, state);
    DROP INDEX grants_user_id;
    ALTER TABLE grants RESET (fillfactor);
  `,
  );
}
