import type { Knex } from "knex";
import { textArray } from "../../db/rows.js";
import { pruneBatchSql } from "../../db/sql.js";

type Conn = Knex | Knex.Transaction;

export interface CodeRecord {
  codeHash: string;
  clientId: string;
  userId: string;
  agentPrincipalId: string;
  vaultId: string;
  scopes: string[];
  redirectUri: string;
  codeChallenge: string;
  stepUp: boolean;
  authTime: Date | null;
  expiresAt: Date;
  consumedAt: Date | null;
  grantId: string | null;
  /** MCP resources named in the authorization request, copied to the grant's `aud`. */
  audiences: string[];
}

/** SQL for authorization codes (the fast exchange that consumes them is in ./grants.ts). */
export function createCodesStore() {
  return {
    async insertCode(conn: Conn, c: CodeRecord): Promise<void> {
      await conn("authorization_codes").insert({
        code_hash: c.codeHash,
        client_id: c.clientId,
        user_id: c.userId,
        agent_principal_id: c.agentPrincipalId,
        vault_id: c.vaultId,
        scopes: c.scopes,
        redirect_uri: c.redirectUri,
        code_challenge: c.codeChallenge,
        step_up: c.stepUp,
        auth_time: c.authTime,
        expires_at: c.expiresAt,
        audiences: c.audiences,
      });
    },

    async lockCode(trx: Knex.Transaction, codeHash: string): Promise<CodeRecord | undefined> {
      const row = await trx("authorization_codes").where({ code_hash: codeHash }).forUpdate().first();
      return row ? toCode(row) : undefined;
    },

    async consumeCode(trx: Knex.Transaction, codeHash: string, grantId: string, at: Date): Promise<void> {
      await trx("authorization_codes").where({ code_hash: codeHash }).update({ consumed_at: at, grant_id: grantId });
    },
  };
}

export type CodesStore = ReturnType<typeof createCodesStore>;

function toCode(r: Record<string, unknown>): CodeRecord {
  return {
    codeHash: String(r.code_hash),
    clientId: String(r.client_id),
    userId: String(r.user_id),
    agentPrincipalId: String(r.agent_principal_id),
    vaultId: String(r.vault_id),
    scopes: textArray(r.scopes),
    redirectUri: String(r.redirect_uri),
    codeChallenge: String(r.code_challenge),
    stepUp: Boolean(r.step_up),
    authTime: r.auth_time ? new Date(r.auth_time as string) : null,
    expiresAt: new Date(r.expires_at as string),
    consumedAt: r.consumed_at ? new Date(r.consumed_at as string) : null,
    grantId: r.grant_id == null ? null : String(r.grant_id),
    audiences: textArray(r.audiences),
  };
}

/** The pruner's batch: codes that expired before the cutoff. */
export const PRUNE_AUTHORIZATION_CODES = { table: "authorization_codes", sql: pruneBatchSql("authorization_codes", "expires_at < ?", "expires_at") } as const;
