import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * A consent withdrawal or a deactivation drops one user's events: found by user, not by walking a
 * partner's feed. A rotated webhook secret is kept, sealed, until its overlap ends, then forgotten.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX partner_events_user ON partner_events ((lower(data->>'user_id')), partner_id);
    ALTER TABLE partners ADD COLUMN webhook_secret_prev_enc text, ADD COLUMN webhook_secret_prev_until timestamptz,
      ADD CONSTRAINT partners_webhook_secret_prev CHECK ((webhook_secret_prev_enc IS NULL) = (webhook_secret_prev_until IS NULL));
    CREATE INDEX partners_webhook_secret_prev_until ON partners (webhook_secret_prev_until) WHERE webhook_secret_prev_until IS NOT NULL;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    DROP INDEX partners_webhook_secret_prev_until;
    ALTER TABLE partners DROP COLUMN webhook_secret_prev_enc, DROP COLUMN webhook_secret_prev_until;
    DROP INDEX partner_events_user;
  `,
  );
}
