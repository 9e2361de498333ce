import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** A message given up (the mail server refused it for good) ends failed, is not sent again, and is pruned like sent mail. */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE mail_outbox DROP CONSTRAINT mail_outbox_state_check;
    ALTER TABLE mail_outbox ADD CONSTRAINT mail_outbox_state_check CHECK (state IN ('pending', 'sent', 'failed'));
    ALTER TABLE mail_outbox ADD COLUMN failed_at timestamptz;
    CREATE INDEX mail_outbox_failed ON mail_outbox (failed_at) WHERE state = 'failed';
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    DELETE FROM mail_outbox WHERE state = 'failed';
    DROP INDEX mail_outbox_failed;
    ALTER TABLE mail_outbox DROP COLUMN failed_at;
    ALTER TABLE mail_outbox DROP CONSTRAINT mail_outbox_state_check;
    ALTER TABLE mail_outbox ADD CONSTRAINT mail_outbox_state_check CHECK (state IN ('pending', 'sent'));
  `,
  );
}
