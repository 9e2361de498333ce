import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * The mail outbox: every sign-in code and account notice to be sent by SMTP is a row here,
 * written in the transaction of the change it reports, and leaves only once a mail server
 * has accepted it. Subject and body are sealed under the sign-in code key (outside the
 * database). A sender leases due rows (attempts counts the lease, next_attempt_at is the
 * lease's end while it is out) and records the result only if its lease is still the
 * latest; a refused or failed attempt is retried later with a growing delay.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE mail_outbox (
      seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      id               uuid NOT NULL UNIQUE,
      recipient        text NOT NULL,
      subject          text NOT NULL,
      body             text NOT NULL,
      created_at       timestamptz NOT NULL,
      state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent')),
      attempts         integer NOT NULL DEFAULT 0,
      next_attempt_at  timestamptz NOT NULL,
      sent_at          timestamptz,
      last_error       text
    );
    CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt_at) WHERE state = 'pending';
    CREATE INDEX mail_outbox_sent ON mail_outbox (sent_at) WHERE state = 'sent';
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE mail_outbox`);
}
