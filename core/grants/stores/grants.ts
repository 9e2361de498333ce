import type { Knex } from "knex";
import type { Db } from "../../db/knex.js";
import { createGroupCommit } from "../../db/group-commit.js";
import { batchFunction, pgArray } from "../../db/sql.js";
import { UUID } from "../../../lib/uuid.js";
import { textArray } from "../../db/rows.js";

type Conn = Knex | Knex.Transaction;

export type GrantState = "active" | "superseded" | "revoked";

export interface GrantRecord {
  id: string;
  lineageId: string;
  parentGrantId: string | null;
  userId: string;
  clientId: string | null;
  agentPrincipalId: string;
  vaultId: string;
  scopes: string[];
  /** What a refresh of this grant may ask for, when a refresh narrowed `scopes` below it; else null. */
  refreshScopes: string[] | null;
  state: GrantState;
  stepUp: boolean;
  authTime: Date | null;
  issuedAt: Date;
  expiresAt: Date;
  refreshHash: string | null;
  /**
   * Salt of a refresh token derived from its predecessor's (docs/reference/agent-oauth.md): the
   * token is HMAC-SHA256(key = the predecessor's token, message = this salt). Null for a
   * lineage's first, random token.
   */
  refreshSalt: string | null;
  refreshUsedAt: Date | null;
  successorId: string | null;
  /** MCP resources the client asked for (RFC 8707), named in `aud` besides MCP_URL and the vault URN. */
  audiences: string[];
}

/** The audit record a fast-path statement appends for the grant it issues (subject = the new grant id). */
export interface FastAudit {
  requestId: string;
  /** The client address a gateway vouched for ("" when none did). */
  clientAddress: string;
  actor: string;
  action: string;
}

export type GrantWithUser = GrantRecord & { userActive: boolean };

/** A code exchange for the fast path (see exchangeCodeFast). */
export interface FastExchange {
  codeHash: string;
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  grantId: string;
  refreshHash: string | null;
  now: Date;
  expiresAt: Date;
}

/** A refresh for the fast path (see rotateRefreshFast). */
export interface FastRefresh {
  refreshHash: string;
  clientId: string;
  issuedAfter: Date;
  grantId: string;
  newRefreshHash: string;
  /** The salt the new refresh token was derived with (GrantRecord.refreshSalt). */
  newRefreshSalt: string;
  now: Date;
  expiresAt: Date;
}

/** Group commit of the token endpoint's fast paths; chosen with `npm run bench agent-oauth`. */
const TOKEN_MAX_BATCH = 64;
const TOKEN_MAX_IN_FLIGHT = 2;

/** A batch's issued grants as one result per item: each item chose its new grant's id. */
function byGrantId(items: { grantId: string }[], rows: Record<string, unknown>[]): (GrantRecord | undefined)[] {
  const issued = new Map<string, GrantRecord>();
  for (const r of rows) issued.set(String(r.id), toGrant(r));
  return items.map((i) => issued.get(i.grantId));
}

/**
 * Repeats a revoking UPDATE until it finds nothing. A refresh or reissue that held a grant the
 * UPDATE waited on committed its successor outside the UPDATE's snapshot; the next pass sees it.
 */
export async function revokeUntilNone(revoke: () => Promise<number>): Promise<number> {
  let total = 0;
  for (let n = await revoke(); n > 0; n = await revoke()) total += n;
  return total;
}

/**
 * Revokes every grant of `where` that is not revoked yet, until none is left (revokeUntilNone). Rows
 * are locked in id order, a grant before its successor, as a refresh locks them: the two never deadlock.
 */
function revokeWhere(trx: Conn, where: Record<string, string>, at: Date, reason: string): Promise<number> {
  return revokeUntilNone(() =>
    trx("grants")
      .whereIn("id", trx("grants").select("id").where(where).whereNot({ state: "revoked" }).orderBy("id").forUpdate())
      .whereNot({ state: "revoked" })
      .update({ state: "revoked", state_changed_at: at, state_reason: reason }),
  );
}

/** SQL for grants: issue, supersede, revoke, and the token endpoint's one-statement fast paths. */
export function createGrantsStore(db: Db) {
  // The token endpoint's hot statements, group-committed as PL/pgSQL functions (migrations 0011, 0013).
  // UPDATE ... FROM matches each item to at most its own row, so a code presented twice in one batch
  // is consumed once and the other item takes the locked slow path, as when two statements race.
  type Exchange = FastExchange & { audit: FastAudit; signal?: AbortSignal };
  type Refresh = FastRefresh & { audit: FastAudit; signal?: AbortSignal };
  const exchangeBatch = batchFunction<Exchange>("grant_exchange_batch", [
    ["text", (i) => i.codeHash],
    ["text", (i) => i.clientId],
    ["text", (i) => i.redirectUri],
    ["text", (i) => i.codeChallenge],
    ["uuid", (i) => i.grantId],
    ["text", (i) => i.refreshHash],
    ["timestamptz", (i) => i.now.toISOString()],
    ["timestamptz", (i) => i.expiresAt.toISOString()],
    ["text", (i) => i.audit.requestId],
    ["text", (i) => i.audit.actor],
    ["text", (i) => i.audit.action],
    ["text", (i) => i.audit.clientAddress],
  ]);
  const refreshBatch = batchFunction<Refresh>("grant_refresh_batch", [
    ["text", (i) => i.refreshHash],
    ["text", (i) => i.clientId],
    ["timestamptz", (i) => i.issuedAfter.toISOString()],
    ["uuid", (i) => i.grantId],
    ["text", (i) => i.newRefreshHash],
    ["text", (i) => i.newRefreshSalt],
    ["timestamptz", (i) => i.now.toISOString()],
    ["timestamptz", (i) => i.expiresAt.toISOString()],
    ["text", (i) => i.audit.requestId],
    ["text", (i) => i.audit.actor],
    ["text", (i) => i.audit.action],
    ["text", (i) => i.audit.clientAddress],
  ]);
  const tokenBatches = { maxBatch: TOKEN_MAX_BATCH, maxInFlight: TOKEN_MAX_IN_FLIGHT, signalOf: (i: { signal?: AbortSignal }) => i.signal };
  const grantWithUser = createGroupCommit<{ id: string; signal?: AbortSignal }, GrantWithUser | undefined>(
    async (items) => {
      const { rows } = await db.raw(`SELECT g.*, u.status AS user_status FROM grants g JOIN users u ON u.id = g.user_id WHERE g.id = ANY(?::uuid[])`, [
        pgArray(items.map((i) => i.id)),
      ]);
      const byId = new Map((rows as Record<string, unknown>[]).map((r) => [String(r.id), r]));
      return items.map(({ id }) => {
        const r = byId.get(id);
        return r ? { ...toGrant(r), userActive: r.user_status === "active" } : undefined;
      });
    },
    { maxBatch: 256, maxInFlight: 2, name: "grant_with_user", signalOf: (i) => i.signal },
  );
  const exchangeFast = createGroupCommit<Exchange, GrantRecord | undefined>(async (items) => byGrantId(items, await exchangeBatch(db, items)), {
    ...tokenBatches,
    name: "token_exchange",
  });
  const refreshFast = createGroupCommit<Refresh, GrantRecord | undefined>(async (items) => byGrantId(items, await refreshBatch(db, items)), {
    ...tokenBatches,
    name: "token_refresh",
  });

  return {
    async insertGrant(trx: Conn, g: GrantRecord): Promise<void> {
      await trx("grants").insert({
        id: g.id,
        lineage_id: g.lineageId,
        parent_grant_id: g.parentGrantId,
        user_id: g.userId,
        client_id: g.clientId,
        agent_principal_id: g.agentPrincipalId,
        vault_id: g.vaultId,
        scopes: g.scopes,
        refresh_scopes: g.refreshScopes,
        state: g.state,
        step_up: g.stepUp,
        auth_time: g.authTime,
        issued_at: g.issuedAt,
        expires_at: g.expiresAt,
        refresh_hash: g.refreshHash,
        refresh_salt: g.refreshSalt,
        refresh_used_at: g.refreshUsedAt,
        successor_id: g.successorId,
        state_changed_at: g.issuedAt,
        audiences: g.audiences,
      });
    },

    async findGrant(conn: Conn, id: string): Promise<GrantRecord | undefined> {
      const row = await conn("grants").where({ id }).first();
      return row ? toGrant(row) : undefined;
    },

    /**
     * The grant with its user's status, read afresh for every call in one group-committed statement
     * begun after each of its calls arrived; a non-UUID id names no grant. An abort of `signal`
     * (ctx.signal) before a batch takes the read withdraws it (DeadlineExceeded), as for exchangeCodeFast.
     */
    findGrantWithUser: (id: string, signal?: AbortSignal): Promise<GrantWithUser | undefined> =>
      UUID.test(id) ? grantWithUser({ id: id.toLowerCase(), signal }) : Promise.resolve(undefined),

    async lockGrant(trx: Knex.Transaction, id: string): Promise<GrantRecord | undefined> {
      const row = await trx("grants").where({ id }).forUpdate().first();
      return row ? toGrant(row) : undefined;
    },

    async lockGrantByRefresh(trx: Knex.Transaction, refreshHash: string): Promise<GrantRecord | undefined> {
      const row = await trx("grants").where({ refresh_hash: refreshHash }).forUpdate().first();
      return row ? toGrant(row) : undefined;
    },

    async findGrantByRefresh(conn: Conn, refreshHash: string): Promise<GrantRecord | undefined> {
      const row = await conn("grants").where({ refresh_hash: refreshHash }).first();
      return row ? toGrant(row) : undefined;
    },

    /** Marks an active grant superseded by `successorId`; `viaRefresh` records the refresh token's use. */
    async supersede(trx: Knex.Transaction, id: string, successorId: string, at: Date, viaRefresh: boolean): Promise<void> {
      await trx("grants")
        .where({ id, state: "active" })
        .update({
          state: "superseded",
          successor_id: successorId,
          state_changed_at: at,
          state_reason: viaRefresh ? "refresh" : "issue",
          ...(viaRefresh ? { refresh_used_at: at } : {}),
        });
    },

    revokeLineage: (trx: Conn, lineageId: string, at: Date, reason: string): Promise<number> => revokeWhere(trx, { lineage_id: lineageId }, at, reason),

    /** The owner's revoke: the grant's lineage, and the codes the user approved for its agent that no client exchanged yet. */
    async revokeLineageOfOwner(trx: Conn, g: Pick<GrantRecord, "lineageId" | "userId" | "agentPrincipalId">, at: Date, reason: string): Promise<number> {
      await trx("authorization_codes").where({ user_id: g.userId, agent_principal_id: g.agentPrincipalId }).whereNull("consumed_at").delete();
      return revokeWhere(trx, { lineage_id: g.lineageId }, at, reason);
    },

    /** The kill switch: every grant of the user, and the codes they approved that were not exchanged yet (those would mint grants after it). */
    async revokeAllOfUser(trx: Conn, userId: string, at: Date, reason: string): Promise<number> {
      await trx("authorization_codes").where({ user_id: userId }).whereNull("consumed_at").delete();
      return revokeWhere(trx, { user_id: userId }, at, reason);
    },

    /**
     * Code exchange's common case in one group-committed statement (no BEGIN/COMMIT round trips).
     * Undefined when any condition fails, with nothing written: the caller then decides under a lock.
     * An abort of `signal` (ctx.signal) before the batch takes the item withdraws it (DeadlineExceeded).
     */
    exchangeCodeFast: (x: FastExchange, audit: FastAudit, signal?: AbortSignal): Promise<GrantRecord | undefined> => exchangeFast({ ...x, audit, signal }),

    /**
     * Refresh's common case in one group-committed statement, like exchangeCodeFast. Undefined on
     * reuse, grace retry, revocation, another client or an inactive user (nothing written): the caller decides under a lock.
     */
    rotateRefreshFast: (x: FastRefresh, audit: FastAudit, signal?: AbortSignal): Promise<GrantRecord | undefined> => refreshFast({ ...x, audit, signal }),
  };
}

export type GrantsStore = ReturnType<typeof createGrantsStore>;

export function toGrant(r: Record<string, unknown>): GrantRecord {
  return {
    id: String(r.id),
    lineageId: String(r.lineage_id),
    parentGrantId: r.parent_grant_id == null ? null : String(r.parent_grant_id),
    userId: String(r.user_id),
    clientId: r.client_id == null ? null : String(r.client_id),
    agentPrincipalId: String(r.agent_principal_id),
    vaultId: String(r.vault_id),
    scopes: textArray(r.scopes),
    refreshScopes: r.refresh_scopes == null ? null : textArray(r.refresh_scopes),
    state: r.state as GrantState,
    stepUp: Boolean(r.step_up),
    authTime: r.auth_time ? new Date(r.auth_time as string) : null,
    issuedAt: new Date(r.issued_at as string),
    expiresAt: new Date(r.expires_at as string),
    refreshHash: r.refresh_hash == null ? null : String(r.refresh_hash),
    refreshSalt: r.refresh_salt == null ? null : String(r.refresh_salt),
    refreshUsedAt: r.refresh_used_at ? new Date(r.refresh_used_at as string) : null,
    successorId: r.successor_id == null ? null : String(r.successor_id),
    audiences: textArray(r.audiences),
  };
}
