import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Agent authorization: OAuth clients, codes, grants with lineage, agent principals, web sessions
 * and sign-in codes. Bearer values are stored only as SHA-256 (client secrets as scrypt).
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE oauth_clients (
      client_id                   text PRIMARY KEY,
      secret_hash                 text NOT NULL,
      client_name                 text NOT NULL,
      redirect_uris               text[] NOT NULL,
      grant_types                 text[] NOT NULL,
      response_types              text[] NOT NULL,
      token_endpoint_auth_method  text NOT NULL,
      scopes                      text[] NOT NULL,
      created_at                  timestamptz NOT NULL
    );

    -- One agent principal per user and OAuth client ('' = operator-issued grants).
    CREATE TABLE oauth_agents (
      user_id             uuid NOT NULL REFERENCES users (id),
      client_id           text NOT NULL,
      agent_principal_id  uuid NOT NULL UNIQUE REFERENCES agent_principals (id),
      PRIMARY KEY (user_id, client_id)
    );

    CREATE TABLE grants (
      id                  uuid PRIMARY KEY,
      lineage_id          uuid NOT NULL,
      parent_grant_id     uuid REFERENCES grants (id),
      user_id             uuid NOT NULL REFERENCES users (id),
      client_id           text REFERENCES oauth_clients (client_id),
      agent_principal_id  uuid NOT NULL REFERENCES agent_principals (id),
      vault_id            uuid NOT NULL REFERENCES vaults (id),
      scopes              text[] NOT NULL,
      state               text NOT NULL CHECK (state IN ('active', 'superseded', 'revoked')),
      step_up             boolean NOT NULL DEFAULT false,
      auth_time           timestamptz,
      issued_at           timestamptz NOT NULL,
      expires_at          timestamptz NOT NULL,
      refresh_hash        text UNIQUE,
      refresh_used_at     timestamptz,
      successor_id        uuid,
      state_changed_at    timestamptz NOT NULL,
      state_reason        text
    );
    CREATE INDEX grants_lineage ON grants (lineage_id);
    CREATE INDEX grants_user ON grants (user_id, state);
    CREATE INDEX grants_agent ON grants (agent_principal_id);

    CREATE TABLE authorization_codes (
      code_hash       text PRIMARY KEY,
      client_id       text NOT NULL REFERENCES oauth_clients (client_id),
      user_id         uuid NOT NULL REFERENCES users (id),
      agent_principal_id uuid NOT NULL REFERENCES agent_principals (id),
      vault_id        uuid NOT NULL REFERENCES vaults (id),
      scopes          text[] NOT NULL,
      redirect_uri    text NOT NULL,
      code_challenge  text NOT NULL,
      step_up         boolean NOT NULL,
      auth_time       timestamptz,
      expires_at      timestamptz NOT NULL,
      consumed_at     timestamptz,
      -- No foreign key: the exchange consumes the code and inserts this grant in one statement.
      grant_id        uuid
    );

    CREATE TABLE web_sessions (
      id           uuid PRIMARY KEY,
      token_hash   text NOT NULL UNIQUE,
      user_id      uuid NOT NULL REFERENCES users (id),
      created_at   timestamptz NOT NULL,
      expires_at   timestamptz NOT NULL,
      step_up_at   timestamptz,
      ended_at     timestamptz
    );

    -- E-mail one-time codes; user_id is null for unknown addresses (nothing is sent).
    CREATE TABLE signin_challenges (
      id          uuid PRIMARY KEY,
      user_id     uuid REFERENCES users (id),
      session_id  uuid REFERENCES web_sessions (id),
      purpose     text NOT NULL CHECK (purpose IN ('sign_in', 'step_up')),
      code_hash   text NOT NULL,
      attempts    integer NOT NULL DEFAULT 0,
      created_at  timestamptz NOT NULL,
      expires_at  timestamptz NOT NULL,
      consumed_at timestamptz
    );

    CREATE TABLE dev_outbox (
      seq         bigint GENERATED ALWAYS AS IDENTITY,
      id          uuid PRIMARY KEY,
      email       text NOT NULL,
      subject     text NOT NULL,
      body        text NOT NULL,
      created_at  timestamptz NOT NULL
    );
    CREATE INDEX dev_outbox_email ON dev_outbox (email, seq);
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP TABLE dev_outbox, signin_challenges, web_sessions, authorization_codes, grants, oauth_agents, oauth_clients`);
}
