import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Identity-provider links (issuer, subject) match a person whatever e-mail is reported later;
 * sign-in flows are found by the hash of a browser cookie secret and consumed once.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE identity_links (
      issuer      text NOT NULL,
      subject     text NOT NULL,
      user_id     uuid NOT NULL REFERENCES users (id),
      email       text,
      created_at  timestamptz NOT NULL,
      last_used_at timestamptz NOT NULL,
      PRIMARY KEY (issuer, subject)
    );
    CREATE INDEX identity_links_user ON identity_links (user_id);

    CREATE TABLE signin_flows (
      id             uuid PRIMARY KEY,
      binding_hash   text NOT NULL UNIQUE,
      method         text NOT NULL CHECK (method IN ('oidc', 'passkey')),
      purpose        text NOT NULL CHECK (purpose IN ('sign_in', 'step_up', 'register')),
      session_id     uuid REFERENCES web_sessions (id) ON DELETE CASCADE,
      user_id        uuid REFERENCES users (id),
      state          text,
      nonce          text,
      code_verifier  text,
      challenge      text,
      created_at     timestamptz NOT NULL,
      expires_at     timestamptz NOT NULL,
      consumed_at    timestamptz
    );
    CREATE INDEX signin_flows_expires ON signin_flows (expires_at);
    -- A pruned session takes its flows with it.
    CREATE INDEX signin_flows_session ON signin_flows (session_id) WHERE session_id IS NOT NULL;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE signin_flows, identity_links`);
}
