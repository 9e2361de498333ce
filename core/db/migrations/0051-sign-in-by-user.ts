import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** An operator's e-mail change retires the user's open codes and ends their sessions: found by user, not by a scan. */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `CREATE INDEX signin_challenges_user_open ON signin_challenges (user_id) WHERE consumed_at IS NULL AND user_id IS NOT NULL;
     CREATE INDEX web_sessions_user_open ON web_sessions (user_id) WHERE ended_at IS NULL;`,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP INDEX web_sessions_user_open; DROP INDEX signin_challenges_user_open;`);
}
