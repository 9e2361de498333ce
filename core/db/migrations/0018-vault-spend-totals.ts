import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Running spend totals on the vault row, so a payment decision reads one row instead of
 * summing the vault's whole payment history (core/budgets/stores/payments.ts).
 *
 * - spent_lifetime_cents: every completed payment of the vault.
 * - spent_day / spent_day_cents: the UTC calendar day of the vault's latest completed
 *   payment and what was completed on that day. A payment on a later day starts the day
 *   afresh; a reader whose UTC day is past spent_day counts 0 for today.
 * - spent_prev_day_cents: what was completed on the day before spent_day. A payment's
 *   time is read before it waits for the vault lock, so around midnight one stamped
 *   23:59:59 can be decided after another stamped 00:00:00 committed; its "today" (every
 *   completion since its own midnight) is then both days, exactly as summing did.
 *
 * They change only in the transaction that completes a payment, which holds the vault row
 * FOR UPDATE (a completed payment is never reversed: only pending ones can be declined).
 * Existing vaults are backfilled from agent_payments. Upgrade every core replica together:
 * a replica of an older version completes payments without moving the totals.
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
