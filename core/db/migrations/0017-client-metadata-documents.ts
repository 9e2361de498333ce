import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * OAuth Client ID Metadata Documents: a client whose client_id is the URL of its metadata
 * document has a row in oauth_clients too (written when a user consents), so codes, grants
 * and agents keep their foreign keys and the dashboard its client name. Such a client is
 * public: it has no secret. The check keeps the two kinds apart: a registered client always
 * has a secret hash, a document client never.
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
