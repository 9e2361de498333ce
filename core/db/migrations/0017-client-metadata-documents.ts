import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Clients identified by a metadata document URL get an oauth_clients row too, so foreign keys
 * hold; the check keeps them public (no secret) and registered clients secret-bearing.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE oauth_clients ALTER COLUMN secret_hash DROP NOT NULL;
    ALTER TABLE oauth_clients ADD COLUMN metadata_document boolean NOT NULL DEFAULT false;
    ALTER TABLE oauth_clients ADD CONSTRAINT oauth_clients_secret_or_document CHECK (metadata_document = (secret_hash IS NULL));
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  // Document clients stay (grants refer to them) with a hash that never verifies.
  await runScript(
    knex,
    `
    ALTER TABLE oauth_clients DROP CONSTRAINT oauth_clients_secret_or_document;
    UPDATE oauth_clients SET secret_hash = '!metadata-document' WHERE secret_hash IS NULL;
    ALTER TABLE oauth_clients ALTER COLUMN secret_hash SET NOT NULL;
    ALTER TABLE oauth_clients DROP COLUMN metadata_document;
  `,
  );
}
