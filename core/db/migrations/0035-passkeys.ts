import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Passkeys (WebAuthn credentials) of users, bound to the relying party of APP_URL. The
 * signature counter is kept so an authenticator whose counter goes back (a clone) is
 * refused; the backed-up and device-bound flags are kept as the authenticator reported
 * them at registration and at each use.
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
