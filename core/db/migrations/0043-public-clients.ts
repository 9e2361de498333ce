import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * A registered client may be public (token_endpoint_auth_method none, no secret), like a
 * metadata-document client: a row has no secret exactly when its method is none.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE oauth_clients DROP CONSTRAINT oauth_clients_secret_or_document;
    ALTER TABLE oauth_clients ADD CONSTRAINT oauth_clients_secret_unless_public CHECK ((secret_hash IS NULL) = (token_endpoint_auth_method = 'none'));
    ALTER TABLE oauth_clients ADD CONSTRAINT oauth_clients_document_is_public CHECK (NOT metadata_document OR secret_hash IS NULL);
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  // Public registered clients keep their rows (grants refer to them) with a hash that never verifies.
  await runScript(
    knex,
    `
    ALTER TABLE oauth_clients DROP CONSTRAINT oauth_clients_document_is_public;
    ALTER TABLE oauth_clients DROP CONSTRAINT oauth_clients_secret_unless_public;
    UPDATE oauth_clients SET secret_hash = '!public-client' WHERE secret_hash IS NULL AND NOT metadata_document;
    ALTER TABLE oauth_clients ADD CONSTRAINT oauth_clients_secret_or_document CHECK (metadata_document = (secret_hash IS NULL));
  `,
  );
}
