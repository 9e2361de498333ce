import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Dashboard decline: the vault owner can decline a pending payment or a draft
 * budget. `declined` is a final state of both (DeclinePayment, DeclineBudget);
 * `declined_at` keeps when, as approved_at and completed_at do for the other outcomes.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE agent_payments DROP CONSTRAINT agent_payments_status_check;
    ALTER TABLE agent_payments ADD CONSTRAINT agent_payments_status_check
      CHECK (status IN ('pending_step_up', 'approved', 'completed', 'declined'));
    ALTER TABLE agent_payments ADD COLUMN declined_at timestamptz;
    ALTER TABLE budgets DROP CONSTRAINT budgets_status_check;
    ALTER TABLE budgets ADD CONSTRAINT budgets_status_check
      CHECK (status IN ('provisioning', 'failed', 'cleanup_pending', 'draft', 'active', 'declined'));
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE budgets DROP CONSTRAINT budgets_status_check;
    ALTER TABLE budgets ADD CONSTRAINT budgets_status_check
      CHECK (status IN ('provisioning', 'failed', 'cleanup_pending', 'draft', 'active'));
    ALTER TABLE agent_payments DROP COLUMN declined_at;
    ALTER TABLE agent_payments DROP CONSTRAINT agent_payments_status_check;
    ALTER TABLE agent_payments ADD CONSTRAINT agent_payments_status_check
      CHECK (status IN ('pending_step_up', 'approved', 'completed'));
  `,
  );
}
