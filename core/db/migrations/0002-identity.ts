import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Users (one per e-mail across partners), their vaults, partner pre-creation receipts
 * and partner consents: shared by the partner, treasury, grants and budgets services.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE users (
      id          uuid PRIMARY KEY,
      email       text NOT NULL UNIQUE,
      status      text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      created_at  timestamptz NOT NULL
    );

    CREATE TABLE vaults (
      id               uuid PRIMARY KEY,
      owner_user_id    uuid NOT NULL REFERENCES users (id),
      parent_vault_id  uuid REFERENCES vaults (id),
      balance_cents    bigint NOT NULL DEFAULT 0 CHECK (balance_cents >= 0),
      currency         text NOT NULL DEFAULT 'USD',
      created_at       timestamptz NOT NULL
    );
    CREATE INDEX vaults_owner ON vaults (owner_user_id);
    CREATE INDEX vaults_parent ON vaults (parent_vault_id);

    -- A partner's pre-creation receipt for a user.
    CREATE TABLE partner_users (
      partner_id  uuid NOT NULL REFERENCES partners (id),
      user_id     uuid NOT NULL REFERENCES users (id),
      created_at  timestamptz NOT NULL,
      PRIMARY KEY (partner_id, user_id)
    );

    -- Agents acting for a user: an OAuth client's principal, or a child created by
    -- agent.budget.create (parent_agent_id set, with its own vault).
    CREATE TABLE agent_principals (
      id               uuid PRIMARY KEY,
      user_id          uuid NOT NULL REFERENCES users (id),
      parent_agent_id  uuid REFERENCES agent_principals (id),
      vault_id         uuid REFERENCES vaults (id),
      display_name     text NOT NULL,
      created_at       timestamptz NOT NULL
    );
    CREATE INDEX agent_principals_user ON agent_principals (user_id);

    -- What a user approved for a partner; an empty scope list means revoked.
    CREATE TABLE consents (
      partner_id  uuid NOT NULL REFERENCES partners (id),
      user_id     uuid NOT NULL REFERENCES users (id),
      scopes      text[] NOT NULL,
      updated_at  timestamptz NOT NULL,
      PRIMARY KEY (partner_id, user_id)
    );
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP TABLE consents, agent_principals, partner_users, vaults, users`);
}
