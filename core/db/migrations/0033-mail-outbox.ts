import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Mail to send is written in the transaction of the change it reports, sealed under a key outside
 * the database, and leased by a sender who records a result only while its lease is the latest.
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
