import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Agent budgets (recorded provisioning sagas), vault policies, the per-vault
 * provisioning claim and agent payments.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    -- One row per agent.budget.create idempotency key under a parent vault. The child
    -- ids are allocated up front so every retry of the key provisions the same ids.
    CREATE TABLE budgets (
      id                  uuid PRIMARY KEY,
      parent_vault_id     uuid NOT NULL REFERENCES vaults (id),
      user_id             uuid NOT NULL REFERENCES users (id),
      parent_agent_id     uuid,
      grant_id            text NOT NULL,
      idempotency_key     text NOT NULL,
      params_hash         text NOT NULL,
      params              jsonb NOT NULL,
      agent_principal_id  uuid NOT NULL,
      vault_id            uuid NOT NULL,
      status              text NOT NULL CHECK (status IN ('provisioning', 'failed', 'cleanup_pending', 'draft', 'active')),
      policy_version      int NOT NULL DEFAULT 0,
      -- Fencing token: each (re)start of the saga and each reaper pass bumps it, and a
      -- step only writes while it still holds the current attempt.
      attempt             int NOT NULL DEFAULT 1,
      steps               jsonb NOT NULL DEFAULT '[]',
      remaining           text[] NOT NULL DEFAULT '{}',
      created_at          timestamptz NOT NULL,
      updated_at          timestamptz NOT NULL,
      UNIQUE (parent_vault_id, idempotency_key)
    );
    CREATE INDEX budgets_user ON budgets (user_id);
    CREATE INDEX budgets_status ON budgets (status) WHERE status IN ('provisioning', 'cleanup_pending');

    -- A parent vault is in at most one provisioning sequence at a time (-32005).
    CREATE TABLE vault_provisioning_claims (
      vault_id    uuid PRIMARY KEY REFERENCES vaults (id),
      budget_id   uuid NOT NULL,
      claimed_at  timestamptz NOT NULL
    );

    -- The spending policy of a vault; draft until installed (policy_version 1).
    CREATE TABLE vault_policies (
      vault_id                   uuid PRIMARY KEY REFERENCES vaults (id),
      status                     text NOT NULL CHECK (status IN ('draft', 'active')),
      version                    int NOT NULL,
      purpose                    text NOT NULL,
      amount_cap_cents_per_tx    bigint,
      amount_cap_cents_per_day   bigint,
      amount_cap_cents_lifetime  bigint,
      step_up_amount_cents       bigint,
      chain_allowlist            text[] NOT NULL,
      time_window_end            timestamptz,
      created_at                 timestamptz NOT NULL,
      updated_at                 timestamptz NOT NULL
    );

    CREATE TABLE agent_payments (
      id                  uuid PRIMARY KEY,
      vault_id            uuid NOT NULL REFERENCES vaults (id),
      user_id             uuid NOT NULL REFERENCES users (id),
      agent_principal_id  uuid,
      grant_id            text NOT NULL,
      idempotency_key     text NOT NULL,
      params_hash         text NOT NULL,
      address             text NOT NULL,
      chain               text NOT NULL,
      token               text NOT NULL,
      amount_cents        bigint NOT NULL CHECK (amount_cents >= 0),
      currency            text NOT NULL,
      status              text NOT NULL CHECK (status IN ('pending_step_up', 'approved', 'completed')),
      created_at          timestamptz NOT NULL,
      approved_at         timestamptz,
      completed_at        timestamptz,
      UNIQUE (vault_id, idempotency_key)
    );
    CREATE INDEX agent_payments_vault_completed ON agent_payments (vault_id, completed_at) WHERE status = 'completed';
    CREATE INDEX agent_payments_user_pending ON agent_payments (user_id) WHERE status = 'pending_step_up';
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP TABLE agent_payments, vault_policies, vault_provisioning_claims, budgets`);
}
