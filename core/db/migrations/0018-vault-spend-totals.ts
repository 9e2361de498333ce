import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Running spend totals on the vault row, so a payment decision reads one row, not the history.
 * They move only under the vault's row lock; the previous day is kept because a payment stamped
 * before midnight can be decided after one stamped after it. Upgrade all core replicas together.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE vaults ADD COLUMN spent_lifetime_cents bigint NOT NULL DEFAULT 0;
    ALTER TABLE vaults ADD COLUMN spent_day date;
    ALTER TABLE vaults ADD COLUMN spent_day_cents bigint NOT NULL DEFAULT 0;
    ALTER TABLE vaults ADD COLUMN spent_prev_day_cents bigint NOT NULL DEFAULT 0;
    UPDATE vaults v SET spent_lifetime_cents = s.lifetime, spent_day = s.day, spent_day_cents = s.day_cents, spent_prev_day_cents = s.prev_cents
      FROM (SELECT t.vault_id, sum(t.amount_cents) AS lifetime, max(t.day) AS day,
                   coalesce(sum(t.amount_cents) FILTER (WHERE t.day = t.last_day), 0) AS day_cents,
                   coalesce(sum(t.amount_cents) FILTER (WHERE t.day = t.last_day - 1), 0) AS prev_cents
              FROM (SELECT vault_id, amount_cents, (completed_at AT TIME ZONE 'UTC')::date AS day,
                           max((completed_at AT TIME ZONE 'UTC')::date) OVER (PARTITION BY vault_id) AS last_day
                      FROM agent_payments WHERE status = 'completed') t
             GROUP BY t.vault_id) s
     WHERE v.id = s.vault_id;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE vaults DROP COLUMN spent_prev_day_cents;
    ALTER TABLE vaults DROP COLUMN spent_day_cents;
    ALTER TABLE vaults DROP COLUMN spent_day;
    ALTER TABLE vaults DROP COLUMN spent_lifetime_cents;
  `,
  );
}
