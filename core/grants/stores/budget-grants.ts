import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { textArray } from "../../db/rows.js";
import { UUID } from "../../../lib/uuid.js";
import type { GrantRecord, GrantState } from "./grants.js";
import { revokeUntilNone } from "./grants.js";

type Conn = Knex | Knex.Transaction;

/** A grant as an agent call on a budget acts under it, read from the database (never from the caller). */
export type AgentGrant = Pick<GrantRecord, "id" | "userId" | "agentPrincipalId" | "vaultId" | "scopes" | "stepUp" | "authTime" | "expiresAt"> & {
  state: GrantState;
  userActive: boolean;
};

/** The columns toAgentGrant reads, from `grants g JOIN users u`: also selected by the payment statements. */
export const GRANT_COLUMNS = `g.id AS g_id, g.user_id AS g_user_id, g.agent_principal_id AS g_agent_principal_id, g.vault_id AS g_vault_id,
                g.scopes AS g_scopes, g.state AS g_state, g.step_up AS g_step_up, g.auth_time AS g_auth_time,
                g.expires_at AS g_expires_at, (u.status = 'active') AS g_user_active`;

/**
 * The grant `grantIdSql` names and its user, as `g` and `u` (what GRANT_COLUMNS and
 * GRANT_USABLE_SQL read): other rooms' statements join it here rather than name the tables.
 */
export const AGENT_GRANT_JOIN = (grantIdSql: string) => `JOIN grants g ON g.id = ${grantIdSql} JOIN users u ON u.id = g.user_id`;

/** The ids of a grant lineage's grants, for other rooms' statements (a lineage revoked as one). */
export const LINEAGE_GRANT_IDS = (lineageIdSql: string) => `SELECT id FROM grants WHERE lineage_id = ${lineageIdSql}`;

/** What a revocation left open is cancelled for: every grant of the user, or one lineage of them. */
export interface RevokedGrants {
  userId: string;
  lineageId?: string;
}

/** What revoked grants left waiting for their owner: the budgets room's, handed to the grants room by core.ts. */
export interface InFlight {
  /** In the revoking transaction: declines their open payments and marks their draft budgets to end; returns those drafts. */
  cancel(trx: Knex.Transaction, revoked: RevokedGrants, at: Date): Promise<string[]>;
  /** Once it committed: declines those drafts, budget rows locked first; what fails is left for the reaper. */
  endDrafts(budgetIds: string[], actor: string, ctx: Pick<HandlerContext, "values">): Promise<void>;
}

/**
 * True when the grant whose id the text `grantIdSql` holds was revoked (with `lineageIdSql`: and is of
 * that lineage), for other rooms' statements. A revoked grant's whole lineage is revoked.
 */
export const GRANT_REVOKED_SQL = (grantIdSql: string, lineageIdSql?: string) =>
  `EXISTS (SELECT 1 FROM grants rg WHERE rg.id = (CASE WHEN ${grantIdSql} ~ '^[0-9a-f-]{36}$' THEN ${grantIdSql}::uuid END)
             AND rg.state = 'revoked'${lineageIdSql ? ` AND rg.lineage_id = ${lineageIdSql}` : ""})`;

/** True when the user of the grant whose id the text `grantIdSql` holds has an account that is not active, for other rooms' statements. */
export const GRANT_USER_INACTIVE_SQL = (grantIdSql: string) =>
  `EXISTS (SELECT 1 FROM grants ig JOIN users iu ON iu.id = ig.user_id
            WHERE ig.id = (CASE WHEN ${grantIdSql} ~ '^[0-9a-f-]{36}$' THEN ${grantIdSql}::uuid END) AND iu.status <> 'active')`;

/** An AgentGrant from a row carrying GRANT_COLUMNS. */
export function toAgentGrant(r: Record<string, unknown>): AgentGrant {
  return {
    id: String(r.g_id),
    userId: String(r.g_user_id),
    agentPrincipalId: String(r.g_agent_principal_id),
    vaultId: String(r.g_vault_id),
    scopes: textArray(r.g_scopes),
    state: String(r.g_state) as GrantState,
    stepUp: Boolean(r.g_step_up),
    authTime: r.g_auth_time ? date(r.g_auth_time) : null,
    expiresAt: date(r.g_expires_at),
    userActive: Boolean(r.g_user_active),
  };
}

const date = (v: unknown) => (v instanceof Date ? v : new Date(String(v)));

/** The grant SQL agent calls on budgets need: reading the caller's grant, revoking a closed budget's grants. */
export function createBudgetGrantsStore() {
  return {
    /**
     * The grant an agent call acts under, read afresh. `lock` takes FOR NO KEY UPDATE, not FOR
     * SHARE: a revocation committed first is seen and none commits in between, and a stream of
     * share lockers cannot starve a waiting revocation. A non-UUID id names no grant.
     */
    async findGrant(conn: Conn, grantId: string, lock = false): Promise<AgentGrant | undefined> {
      if (!UUID.test(grantId)) return undefined;
      const { rows } = await conn.raw(
        `SELECT ${GRANT_COLUMNS} FROM grants g JOIN users u ON u.id = g.user_id WHERE g.id = ?${lock ? " FOR NO KEY UPDATE OF g" : ""}`,
        [grantId.toLowerCase()],
      );
      const r = (rows as Record<string, unknown>[])[0];
      return r ? toAgentGrant(r) : undefined;
    },

    /**
     * Revokes every grant on these vaults not revoked yet (superseded ones too: their refresh
     * token could mint a new grant); returns how many. Reached through the user's index, in the
     * kill switch's order.
     */
    async revokeVaultGrants(trx: Knex.Transaction, userId: string, vaultIds: string[], at: Date, reason: string): Promise<number> {
      return revokeUntilNone(() =>
        trx("grants")
          .where({ user_id: userId })
          .whereIn("vault_id", vaultIds)
          .whereNot({ state: "revoked" })
          .update({ state: "revoked", state_changed_at: at, state_reason: reason }),
      );
    },
  };
}

export type BudgetGrantsStore = ReturnType<typeof createBudgetGrantsStore>;
