import type { Knex } from "knex";
import { textArray } from "../../db/rows.js";

type Conn = Knex | Knex.Transaction;

export interface ClientRecord {
  clientId: string;
  /** Null for a public client (token_endpoint_auth_method none), such as one described by a metadata document. */
  secretHash: string | null;
  clientName: string;
  redirectUris: string[];
  grantTypes: string[];
  responseTypes: string[];
  tokenEndpointAuthMethod: string;
  scopes: string[];
  createdAt: Date;
  /** A client whose client_id is the URL of its metadata document (core/grants/client-id-metadata.ts). */
  metadataDocument?: boolean;
}

/** A client's registered metadata as oauth_clients columns. */
function clientMetadataColumns(c: ClientRecord) {
  return {
    client_name: c.clientName,
    redirect_uris: c.redirectUris,
    grant_types: c.grantTypes,
    response_types: c.responseTypes,
    token_endpoint_auth_method: c.tokenEndpointAuthMethod,
    scopes: c.scopes,
  };
}

/** SQL for OAuth clients: registered ones, and rows of metadata-document clients. */
export function createClientsStore() {
  return {
    async insertClient(conn: Conn, c: ClientRecord): Promise<{ inserted: boolean }> {
      try {
        await conn("oauth_clients").insert({ client_id: c.clientId, secret_hash: c.secretHash, created_at: c.createdAt, ...clientMetadataColumns(c) });
        return { inserted: true };
      } catch (err) {
        if ((err as { code?: string }).code === "23505") return { inserted: false };
        throw err;
      }
    },

    /**
     * The row of a client described by a metadata document, written (or brought up to
     * date) when a user consents, so codes, grants and the dashboard can refer to it.
     * Never touches a registered client's row.
     */
    async upsertDocumentClient(conn: Conn, c: ClientRecord): Promise<void> {
      const fields = clientMetadataColumns(c);
      await conn("oauth_clients")
        .insert({ client_id: c.clientId, secret_hash: null, metadata_document: true, created_at: c.createdAt, ...fields })
        .onConflict("client_id")
        .merge(fields)
        .where("oauth_clients.metadata_document", true);
    },

    async findClient(conn: Conn, clientId: string): Promise<ClientRecord | undefined> {
      const row = await conn("oauth_clients").where({ client_id: clientId }).first();
      return row ? toClient(row) : undefined;
    },

    /** Replaces a client's secret hash only if it is still `from` (a rehash at new parameters); true when replaced. */
    async replaceClientSecretHash(conn: Conn, clientId: string, from: string, to: string): Promise<boolean> {
      return (await conn("oauth_clients").where({ client_id: clientId, secret_hash: from }).update({ secret_hash: to })) > 0;
    },
  };
}

export type ClientsStore = ReturnType<typeof createClientsStore>;

function toClient(r: Record<string, unknown>): ClientRecord {
  return {
    clientId: String(r.client_id),
    secretHash: r.secret_hash == null ? null : String(r.secret_hash),
    clientName: String(r.client_name),
    redirectUris: textArray(r.redirect_uris),
    grantTypes: textArray(r.grant_types),
    responseTypes: textArray(r.response_types),
    tokenEndpointAuthMethod: String(r.token_endpoint_auth_method),
    scopes: textArray(r.scopes),
    createdAt: new Date(r.created_at as string),
    metadataDocument: Boolean(r.metadata_document),
  };
}
