import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { createGroupCommit } from "../db/group-commit.js";
import { batchFunction, pgArray } from "../db/sql.js";
import { UUID } from "../uuid.js";

type Conn = Knex | Knex.Transaction;

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

export type GrantState = "active" | "superseded" | "revoked";

export interface ClientRecord {
  clientId: string;
  /** Null for a client described by a metadata document (a public client without a secret). */
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

export interface GrantRecord {
  id: string;
  lineageId: string;
  parentGrantId: string | null;
  userId: string;
  clientId: string | null;
  agentPrincipalId: string;
  vaultId: string;
  scopes: string[];
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

export interface ChallengeRecord {
  id: string;
  userId: string | null;
  sessionId: string | null;
  purpose: "sign_in" | "step_up";
  /** The normalised e-mail address the code went to: wrong codes are limited per account. */
  account: string | null;
  codeHash: string;
  attempts: number;
  expiresAt: Date;
  consumedAt: Date | null;
}

/** The audit record a fast-path statement appends for the grant it issues (subject = the new grant id). */
export interface FastAudit {
  requestId: string;
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
  refreshHash: string;
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

/** SQL for OAuth clients, codes, grants, sessions, one-time codes and the dev outbox. */
export function createGrantsStore(db: Db) {
  // The token endpoint's two hot statements, group-committed (core/db/group-commit.ts):
  // requests that arrive together share one statement, one round trip and one commit.
  // The statements are PL/pgSQL functions (migrations 0011, 0013) so each session plans them once.
  // Each item keeps its own result: an UPDATE ... FROM matches every item to at most its
  // own row (a code or refresh token presented twice in one batch is consumed once; the
  // other item gets nothing and takes the locked slow path, exactly as when two
  // statements race).
  type Exchange = FastExchange & { audit: FastAudit };
  type Refresh = FastRefresh & { audit: FastAudit };
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
  ]);
  const tokenBatches = { maxBatch: TOKEN_MAX_BATCH, maxInFlight: TOKEN_MAX_IN_FLIGHT };
  const grantWithUser = createGroupCommit<string, GrantWithUser | undefined>(
    async (ids) => {
      const { rows } = await db.raw(
        `SELECT g.*, u.status AS user_status FROM grants g JOIN users u ON u.id = g.user_id WHERE g.id = ANY(?::uuid[])`,
        [pgArray(ids)],
      );
      const byId = new Map((rows as Record<string, unknown>[]).map((r) => [String(r.id), r]));
      return ids.map((id) => {
        const r = byId.get(id);
        return r ? { ...toGrant(r), userActive: r.user_status === "active" } : undefined;
      });
    },
    { maxBatch: 256, maxInFlight: 2, name: "grant_with_user" },
  );
  const exchangeFast = createGroupCommit<Exchange, GrantRecord | undefined>(async (items) => byGrantId(items, await exchangeBatch(db, items)), { ...tokenBatches, name: "token_exchange" });
  const refreshFast = createGroupCommit<Refresh, GrantRecord | undefined>(async (items) => byGrantId(items, await refreshBatch(db, items)), { ...tokenBatches, name: "token_refresh" });

  /** The agent principal of a user and client, created on first use. */
  async function ensureAgent(trx: Knex.Transaction, a: { id: string; userId: string; clientKey: string; displayName: string; at: Date }): Promise<string> {
    const existing = await trx("oauth_agents").where({ user_id: a.userId, client_id: a.clientKey }).first();
    if (existing) return String(existing.agent_principal_id);
    await trx("agent_principals").insert({ id: a.id, user_id: a.userId, display_name: a.displayName, created_at: a.at });
    const { rows } = await trx.raw(
      `INSERT INTO oauth_agents (user_id, client_id, agent_principal_id) VALUES (?, ?, ?)
       ON CONFLICT (user_id, client_id) DO NOTHING RETURNING agent_principal_id`,
      [a.userId, a.clientKey, a.id],
    );
    if ((rows as unknown[]).length > 0) return a.id;
    // A concurrent first consent won; drop ours and use theirs.
    await trx("agent_principals").where({ id: a.id }).delete();
    const row = await trx("oauth_agents").where({ user_id: a.userId, client_id: a.clientKey }).first();
    return String(row.agent_principal_id);
  }

  /**
   * The budget principal of a vault: when `vaultId` is a budget's own vault (the vault of
   * a child agent principal of `userId`, made by agent.budget.create), that principal;
   * undefined for every other vault. The row is locked FOR KEY SHARE until the caller's
   * transaction ends, so a budget cleanup cannot delete it between this read and the
   * insert that refers to it: a cleanup that committed first is not seen (no principal),
   * one that comes later waits and then finds the principal in use.
   */
  async function budgetPrincipalOfVault(trx: Knex.Transaction, userId: string, vaultId: string): Promise<string | undefined> {
    const row = await trx("agent_principals")
      .where({ vault_id: vaultId, user_id: userId })
      .whereNotNull("parent_agent_id")
      .orderBy([{ column: "created_at" }, { column: "id" }])
      .forKeyShare()
      .first("id");
    return row ? String(row.id) : undefined;
  }

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

    /**
     * The one decision of which agent principal a new grant or authorization code acts as
     * (docs/reference/agent-oauth.md): on a budget's vault, the budget's principal; on any other
     * vault, the principal of the user and client (created on first use). Call it in the
     * transaction that inserts the grant or code.
     */
    async principalForGrant(trx: Knex.Transaction, a: { id: string; userId: string; vaultId: string; clientKey: string; displayName: string; at: Date }): Promise<string> {
      return (await budgetPrincipalOfVault(trx, a.userId, a.vaultId)) ?? (await ensureAgent(trx, a));
    },

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
     * The grant with its user's status, for verification, read afresh for every call:
     * concurrent calls share one statement (group commit), whose read starts after each
     * of its calls arrived. Each caller gets its own record. A non-UUID id names no grant.
     */
    findGrantWithUser: (id: string): Promise<GrantWithUser | undefined> => (UUID.test(id) ? grantWithUser(id.toLowerCase()) : Promise.resolve(undefined)),

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
        .update({ state: "superseded", successor_id: successorId, state_changed_at: at, state_reason: viaRefresh ? "refresh" : "issue", ...(viaRefresh ? { refresh_used_at: at } : {}) });
    },

    async revokeLineage(trx: Conn, lineageId: string, at: Date, reason: string): Promise<number> {
      return trx("grants").where({ lineage_id: lineageId }).whereNot({ state: "revoked" }).update({ state: "revoked", state_changed_at: at, state_reason: reason });
    },

    async revokeAllOfUser(trx: Conn, userId: string, at: Date, reason: string): Promise<number> {
      return trx("grants").where({ user_id: userId }).whereNot({ state: "revoked" }).update({ state: "revoked", state_changed_at: at, state_reason: reason });
    },

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

    /**
     * The common case of a code exchange: consumes a code that is unused, unexpired, of
     * an active user and matching client, redirect URI and PKCE challenge, inserts its
     * grant and appends the audit record, all in one statement (atomic on its own, so no
     * BEGIN/COMMIT round trips). Group-committed: concurrent exchanges share the
     * statement (see exchangeBatch). Undefined when any condition fails (nothing is
     * written; the caller then inspects the code under a lock).
     */
    exchangeCodeFast: (x: FastExchange, audit: FastAudit): Promise<GrantRecord | undefined> => exchangeFast({ ...x, audit }),

    /**
     * The common case of a refresh: supersedes an active grant of an active user whose
     * refresh token is unused, issues its successor in the same lineage and appends the
     * audit record, in one statement, group-committed like exchangeCodeFast. Undefined
     * otherwise (reuse, grace retry, revoked, other client, inactive user; nothing is
     * written): the caller decides under a row lock.
     */
    rotateRefreshFast: (x: FastRefresh, audit: FastAudit): Promise<GrantRecord | undefined> => refreshFast({ ...x, audit }),

    async lockCode(trx: Knex.Transaction, codeHash: string): Promise<CodeRecord | undefined> {
      const row = await trx("authorization_codes").where({ code_hash: codeHash }).forUpdate().first();
      return row ? toCode(row) : undefined;
    },

    async consumeCode(trx: Knex.Transaction, codeHash: string, grantId: string, at: Date): Promise<void> {
      await trx("authorization_codes").where({ code_hash: codeHash }).update({ consumed_at: at, grant_id: grantId });
    },

    async vaultsOfUser(conn: Conn, userId: string): Promise<{ id: string; parentVaultId: string | null }[]> {
      const rows = await conn("vaults").where({ owner_user_id: userId }).orderBy("created_at").select("id", "parent_vault_id");
      return rows.map((r: Record<string, unknown>) => ({ id: String(r.id), parentVaultId: r.parent_vault_id == null ? null : String(r.parent_vault_id) }));
    },

    /**
     * The owner of a vault. With `lock` (in the transaction that inserts a grant or code on
     * it) the row is locked FOR KEY SHARE: a concurrent delete (a budget cleanup) either
     * committed first and the vault is gone, or waits and then finds it in use.
     */
    async vaultOwner(conn: Conn, vaultId: string, lock = false): Promise<string | undefined> {
      const q = conn("vaults").where({ id: vaultId }).first("owner_user_id");
      const row = lock ? await q.forKeyShare() : await q;
      return row ? String(row.owner_user_id) : undefined;
    },

    /**
     * The status of the budget whose vault this is (undefined for a vault that is no
     * budget's), its row locked FOR NO KEY UPDATE in the transaction that binds a grant or
     * code to the vault: a close or decline (which lock that row FOR UPDATE first) either
     * committed before and is seen, or waits until the grant is in and then revokes it.
     * Taken before any grant or vault lock, in the budgets' lock order.
     */
    async lockBudgetStatusOfVault(trx: Knex.Transaction, vaultId: string): Promise<string | undefined> {
      const { rows } = await trx.raw(`SELECT status FROM budgets WHERE vault_id = ? FOR NO KEY UPDATE`, [vaultId]);
      const r = (rows as { status: string }[])[0];
      return r?.status;
    },

    async findUserByEmail(conn: Conn, email: string): Promise<{ id: string; status: string } | undefined> {
      const row = await conn("users").where({ email }).first("id", "status");
      return row ? { id: String(row.id), status: String(row.status) } : undefined;
    },

    async findUser(conn: Conn, id: string): Promise<{ id: string; email: string; status: string } | undefined> {
      const row = await conn("users").where({ id }).first("id", "email", "status");
      return row ? { id: String(row.id), email: String(row.email), status: String(row.status) } : undefined;
    },

    async insertSession(conn: Conn, s: { id: string; tokenHash: string; userId: string; at: Date; expiresAt: Date }): Promise<void> {
      await conn("web_sessions").insert({ id: s.id, token_hash: s.tokenHash, user_id: s.userId, created_at: s.at, expires_at: s.expiresAt });
    },

    async setStepUp(conn: Conn, sessionId: string, at: Date): Promise<void> {
      await conn("web_sessions").where({ id: sessionId }).update({ step_up_at: at });
    },

    async endSession(conn: Conn, tokenHash: string, at: Date): Promise<void> {
      await conn("web_sessions").where({ token_hash: tokenHash }).whereNull("ended_at").update({ ended_at: at });
    },

    async insertChallenge(conn: Conn, c: ChallengeRecord & { createdAt: Date }): Promise<void> {
      await conn("signin_challenges").insert({
        id: c.id,
        user_id: c.userId,
        session_id: c.sessionId,
        purpose: c.purpose,
        account: c.account,
        code_hash: c.codeHash,
        attempts: c.attempts,
        created_at: c.createdAt,
        expires_at: c.expiresAt,
      });
    },

    async lockChallenge(trx: Knex.Transaction, id: string): Promise<ChallengeRecord | undefined> {
      const row = await trx("signin_challenges").where({ id }).forUpdate().first();
      return row ? challengeRecord(row) : undefined;
    },

    async findChallenge(conn: Conn, id: string): Promise<ChallengeRecord | undefined> {
      const row = await conn("signin_challenges").where({ id }).first();
      return row ? challengeRecord(row) : undefined;
    },

    async countAttempt(conn: Conn, id: string): Promise<void> {
      await conn("signin_challenges").where({ id }).increment("attempts", 1);
    },

    async consumeChallenge(conn: Conn, id: string, at: Date): Promise<void> {
      await conn("signin_challenges").where({ id }).update({ consumed_at: at });
    },

    async insertOutbox(conn: Conn, m: { id: string; email: string; subject: string; body: string; at: Date }): Promise<void> {
      await conn("dev_outbox").insert({ id: m.id, email: m.email, subject: m.subject, body: m.body, created_at: m.at });
    },

    async listOutbox(conn: Conn, email: string | undefined, limit = 100) {
      const q = conn("dev_outbox").orderBy("seq", "desc").limit(limit);
      if (email) q.where({ email });
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({
        email: String(r.email),
        subject: String(r.subject),
        body: String(r.body),
        createdAt: new Date(r.created_at as string),
      }));
    },

    /**
     * The user's agents with their grants, newest first: the principal of each OAuth client
     * (and of operator-issued grants), and each budget principal that has grants (a grant
     * on a budget's vault acts as the budget). A budget principal is named by its budget,
     * with the client of the agent that created it when there is one.
     */
    async agentsOfUser(conn: Conn, userId: string, agentId?: string) {
      const oauth = conn("oauth_agents as a")
        .join("agent_principals as p", "p.id", "a.agent_principal_id")
        .leftJoin("oauth_clients as c", "c.client_id", "a.client_id")
        .where({ "a.user_id": userId })
        .select("a.agent_principal_id", "a.client_id", "p.display_name", "c.client_name", "p.created_at");
      if (agentId) oauth.where({ "a.agent_principal_id": agentId });
      const budgets = conn("agent_principals as p")
        .leftJoin("oauth_agents as pa", "pa.agent_principal_id", "p.parent_agent_id")
        .leftJoin("oauth_clients as c", "c.client_id", "pa.client_id")
        .where({ "p.user_id": userId })
        .whereNotNull("p.parent_agent_id")
        .whereExists((q) => q.select(conn.raw("1")).from("grants as g").whereRaw("g.agent_principal_id = p.id").where({ "g.user_id": userId }))
        .select("p.id as agent_principal_id", "pa.client_id", "p.display_name", "c.client_name", "p.created_at");
      if (agentId) budgets.where({ "p.id": agentId });
      const [clientRows, budgetRows] = await Promise.all([oauth, budgets]);
      const agents = [
        ...clientRows.map((a: Record<string, unknown>) => ({
          agentId: String(a.agent_principal_id),
          clientId: String(a.client_id),
          displayName: String(a.client_name ?? a.display_name),
          createdAt: new Date(a.created_at as string),
        })),
        ...budgetRows.map((a: Record<string, unknown>) => ({
          agentId: String(a.agent_principal_id),
          clientId: a.client_id == null ? "" : String(a.client_id),
          displayName: a.client_name == null ? String(a.display_name) : `${String(a.display_name)} (via ${String(a.client_name)})`,
          createdAt: new Date(a.created_at as string),
        })),
      ].sort((x, y) => y.createdAt.getTime() - x.createdAt.getTime());
      const ids = agents.map((a) => a.agentId);
      const grants =
        ids.length === 0 ? [] : await conn("grants").whereIn("agent_principal_id", ids).where({ user_id: userId }).orderBy("issued_at", "desc").limit(500);
      return agents.map(({ createdAt: _, ...a }) => ({
        ...a,
        grants: grants.filter((g: Record<string, unknown>) => String(g.agent_principal_id) === a.agentId).map(toGrant),
      }));
    },

    db,
  };
}

export type GrantsStore = ReturnType<typeof createGrantsStore>;

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

function toGrant(r: Record<string, unknown>): GrantRecord {
  return {
    id: String(r.id),
    lineageId: String(r.lineage_id),
    parentGrantId: r.parent_grant_id == null ? null : String(r.parent_grant_id),
    userId: String(r.user_id),
    clientId: r.client_id == null ? null : String(r.client_id),
    agentPrincipalId: String(r.agent_principal_id),
    vaultId: String(r.vault_id),
    scopes: textArray(r.scopes),
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

function textArray(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === "string") return value.replace(/^\{|\}$/g, "").split(",").filter(Boolean);
  return [];
}

function challengeRecord(row: Record<string, unknown>): ChallengeRecord {
  return {
    id: String(row.id),
    userId: row.user_id == null ? null : String(row.user_id),
    sessionId: row.session_id == null ? null : String(row.session_id),
    purpose: row.purpose as ChallengeRecord["purpose"],
    account: row.account == null ? null : String(row.account),
    codeHash: String(row.code_hash),
    attempts: Number(row.attempts),
    expiresAt: new Date(row.expires_at as string),
    consumedAt: row.consumed_at ? new Date(row.consumed_at as string) : null,
  };
}
