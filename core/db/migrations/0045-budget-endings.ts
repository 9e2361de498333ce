import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Budgets whose end is unfinished, for the reaper to end in the budgets' lock order: drafts whose
 * creating grant was revoked, and declined drafts with open budgets below them or money left.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    -- No foreign key: a revoke marks drafts holding grant locks, and the key check would lock the budget row.
    CREATE TABLE budget_endings (
      budget_id  uuid PRIMARY KEY,
      marked_at  timestamptz NOT NULL
    );
  `,
  );
  await markUnfinished(knex);
}

/** Marks what older releases left: a revoked agent's drafts, and declined drafts whose tree they did not end. */
export async function markUnfinished(knex: Knex): Promise<void> {
  await knex.raw(`
    INSERT INTO budget_endings (budget_id, marked_at)
    SELECT b.id, now() FROM budgets b
     WHERE (b.status = 'draft' AND EXISTS (SELECT 1 FROM grants g WHERE g.id::text = b.grant_id AND g.state = 'revoked'))
        OR (b.status = 'declined' AND (EXISTS (SELECT 1 FROM budgets c WHERE c.parent_vault_id = b.vault_id AND c.status IN ('draft', 'active', 'declined'))
                                    OR EXISTS (SELECT 1 FROM vaults v WHERE v.id = b.vault_id AND v.balance_cents > 0)))
    ON CONFLICT (budget_id) DO NOTHING`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP TABLE budget_endings`);
}
