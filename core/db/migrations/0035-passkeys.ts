import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Passkeys bound to APP_URL's relying party; the signature counter is kept so a cloned
 * authenticator (counter going back) is refused.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE passkeys (
      id            uuid PRIMARY KEY,
      credential_id text NOT NULL UNIQUE,
      user_id       uuid NOT NULL REFERENCES users (id),
      rp_id         text NOT NULL,
      public_key    bytea NOT NULL,
      counter       bigint NOT NULL CHECK (counter >= 0),
      transports    text[] NOT NULL DEFAULT '{}',
      device_type   text NOT NULL CHECK (device_type IN ('singleDevice', 'multiDevice')),
      backed_up     boolean NOT NULL,
      aaguid        text NOT NULL,
      name          text NOT NULL,
      created_at    timestamptz NOT NULL,
      last_used_at  timestamptz,
      removed_at    timestamptz
    );
    CREATE INDEX passkeys_user ON passkeys (user_id) WHERE removed_at IS NULL;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE passkeys`);
}
