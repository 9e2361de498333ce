import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * A refresh changes `state`; with it in the grants_user index every rotation rewrote all five
 * indexes. Indexing user_id alone and leaving page free space keeps rotations HOT updates.
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
