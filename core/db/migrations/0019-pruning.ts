import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Indexes for the pruner to find expired rows in bounded batches however large tables grow.
 * Rate-limit rows written before (or by an older replica) get an hour, longer than any window.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE rate_limit_logs ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now() + interval '1 hour';
    CREATE INDEX rate_limit_logs_expires ON rate_limit_logs (expires_at);
    CREATE INDEX authorization_codes_expires ON authorization_codes (expires_at);
    CREATE INDEX web_sessions_expires ON web_sessions (expires_at);
    CREATE INDEX web_sessions_ended ON web_sessions (ended_at) WHERE ended_at IS NOT NULL;
    CREATE INDEX signin_challenges_expires ON signin_challenges (expires_at);
    CREATE INDEX signin_challenges_session ON signin_challenges (session_id) WHERE session_id IS NOT NULL;
    CREATE INDEX partner_events_settled ON partner_events (created_at) WHERE delivery_state <> 'pending';
    CREATE INDEX dev_outbox_created ON dev_outbox (created_at);
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    DROP INDEX dev_outbox_created;
    DROP INDEX partner_events_settled;
    DROP INDEX signin_challenges_session;
    DROP INDEX signin_challenges_expires;
    DROP INDEX web_sessions_ended;
    DROP INDEX web_sessions_expires;
    DROP INDEX authorization_codes_expires;
    DROP INDEX rate_limit_logs_expires;
    ALTER TABLE rate_limit_logs DROP COLUMN expires_at;
  `,
  );
}
