import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** The dashboard pages a user's agents newest first: read in index order, one page at a time. */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX agent_principals_user_created ON agent_principals (user_id, created_at DESC, id DESC);
    DROP INDEX agent_principals_user;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX agent_principals_user ON agent_principals (user_id);
    DROP INDEX agent_principals_user_created;
  `,
  );
}
