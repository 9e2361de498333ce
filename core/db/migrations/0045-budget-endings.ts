import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Budgets whose end is unfinished, for the reaper to end in the budgets' lock order: drafts whose
 * creating grant was revoked.
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
    -- Left by releases that did not decline a revoked agent's drafts.
    INSERT INTO budget_endings (budget_id, marked_at)
    SELECT b.id, now() FROM budgets b
     WHERE (b.status = 'draft' AND EXISTS (SELECT 1 FROM grants g WHERE g.id::text = b.grant_id AND g.state = 'revoked'));
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP TABLE budget_endings`);
}
