import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Budgets can be funded and closed: a closed policy passes no payment and is never reactivated;
 * indexes find a budget by vault and a closing budget's open payments without a scan.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE budgets DROP CONSTRAINT budgets_status_check;
    ALTER TABLE budgets ADD CONSTRAINT budgets_status_check
      CHECK (status IN ('provisioning', 'failed', 'cleanup_pending', 'draft', 'active', 'declined', 'closed'));
    ALTER TABLE budgets ADD COLUMN closed_at timestamptz;
    CREATE UNIQUE INDEX budgets_vault ON budgets (vault_id);
    CREATE INDEX agent_payments_vault_open ON agent_payments (vault_id) WHERE status IN ('pending_step_up', 'approved');
    ALTER TABLE vault_policies DROP CONSTRAINT vault_policies_status_check;
    ALTER TABLE vault_policies ADD CONSTRAINT vault_policies_status_check CHECK (status IN ('draft', 'active', 'closed'));
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    UPDATE vault_policies SET status = 'draft' WHERE status = 'closed';
    ALTER TABLE vault_policies DROP CONSTRAINT vault_policies_status_check;
    ALTER TABLE vault_policies ADD CONSTRAINT vault_policies_status_check CHECK (status IN ('draft', 'active'));
    DROP INDEX agent_payments_vault_open;
    DROP INDEX budgets_vault;
    ALTER TABLE budgets DROP COLUMN closed_at;
    UPDATE budgets SET status = 'declined' WHERE status = 'closed';
    ALTER TABLE budgets DROP CONSTRAINT budgets_status_check;
    ALTER TABLE budgets ADD CONSTRAINT budgets_status_check
      CHECK (status IN ('provisioning', 'failed', 'cleanup_pending', 'draft', 'active', 'declined'));
  `,
  );
}
