import type { Knex } from "knex";
import { UUID } from "../../../lib/uuid.js";
import { GRANT_REVOKED_SQL, type RevokedGrants } from "../../grants/stores/budget-grants.js";
import { PROVISIONED, toBudget, type BudgetRecord, type Conn } from "../records.js";

/** SQL for budget rows and the policies a budget's owner activates or a close freezes. */
export const budgetsStore = {
  async findBudget(conn: Conn, parentVaultId: string, idempotencyKey: string): Promise<BudgetRecord | undefined> {
    const row = await conn("budgets").where({ parent_vault_id: parentVaultId, idempotency_key: idempotencyKey }).first();
    return row ? toBudget(row) : undefined;
  },

  /** The provisioned budget (draft, active, declined or closed) of a child agent principal. */
  async findBudgetByAgent(conn: Conn, agentPrincipalId: string, lock = false): Promise<BudgetRecord | undefined> {
    const q = conn("budgets").where({ agent_principal_id: agentPrincipalId }).whereIn("status", PROVISIONED).first();
    const row = lock ? await q.forUpdate() : await q;
    return row ? toBudget(row) : undefined;
  },

  /** The provisioned budget (draft, active, declined or closed) whose vault this is. A non-UUID id names none. */
  async findBudgetByVault(conn: Conn, vaultId: string, lock = false): Promise<BudgetRecord | undefined> {
    if (!UUID.test(vaultId)) return undefined;
    const q = conn("budgets").where({ vault_id: vaultId.toLowerCase() }).whereIn("status", PROVISIONED).first();
    const row = lock ? await q.forUpdate() : await q;
    return row ? toBudget(row) : undefined;
  },

  /** The status of the budget whose vault this is, in any state (its creation too), locked; undefined outside any budget. */
  async lockStatusOfVault(trx: Knex.Transaction, vaultId: string): Promise<BudgetRecord["status"] | undefined> {
    const row = await trx("budgets").where({ vault_id: vaultId.toLowerCase() }).forUpdate().first("status");
    return row ? (row.status as BudgetRecord["status"]) : undefined;
  },

  /** Inserts unless the key exists under the parent vault; `inserted` says which. */
  async insertBudget(trx: Conn, b: BudgetRecord): Promise<{ inserted: boolean }> {
    const { rows } = await trx.raw(
      `INSERT INTO budgets (id, parent_vault_id, user_id, parent_agent_id, grant_id, idempotency_key, params_hash, params,
                            agent_principal_id, vault_id, status, policy_version, attempt, steps, remaining, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?)
       ON CONFLICT (parent_vault_id, idempotency_key) DO NOTHING RETURNING id`,
      [
        b.id,
        b.parentVaultId,
        b.userId,
        b.parentAgentId,
        b.grantId,
        b.idempotencyKey,
        b.paramsHash,
        JSON.stringify(b.params),
        b.agentPrincipalId,
        b.vaultId,
        b.status,
        b.policyVersion,
        b.attempt,
        JSON.stringify(b.steps),
        b.remaining,
        b.createdAt,
        b.updatedAt,
      ],
    );
    return { inserted: (rows as unknown[]).length > 0 };
  },

  async updateBudget(
    conn: Conn,
    id: string,
    fields: Partial<Pick<BudgetRecord, "status" | "policyVersion" | "steps" | "remaining" | "grantId" | "attempt" | "closedAt">> & { keepsFunds?: boolean },
    at: Date,
  ): Promise<BudgetRecord> {
    const patch: Record<string, unknown> = { updated_at: at };
    if (fields.keepsFunds !== undefined) patch.keeps_funds = fields.keepsFunds;
    if (fields.status !== undefined) patch.status = fields.status;
    if (fields.policyVersion !== undefined) patch.policy_version = fields.policyVersion;
    if (fields.steps !== undefined) patch.steps = JSON.stringify(fields.steps);
    if (fields.remaining !== undefined) patch.remaining = fields.remaining;
    if (fields.grantId !== undefined) patch.grant_id = fields.grantId;
    if (fields.attempt !== undefined) patch.attempt = fields.attempt;
    if (fields.closedAt !== undefined) patch.closed_at = fields.closedAt;
    const [row] = await conn("budgets").where({ id }).update(patch).returning("*");
    return toBudget(row);
  },

  async lockBudget(trx: Knex.Transaction, id: string): Promise<BudgetRecord | undefined> {
    const row = await trx("budgets").where({ id }).forUpdate().first();
    return row ? toBudget(row) : undefined;
  },

  /**
   * A user's draft budgets, oldest first (created_at, id); with `page`, at most `limit`
   * strictly after `after` (a created_at as PostgreSQL prints it, and an id). Each row's
   * `key` is its position, for the next page's cursor.
   */
  async listDraftBudgets(
    conn: Conn,
    userId: string,
    page?: { limit: number; after?: { at: string; id: string } },
    agentPrincipalId?: string,
  ): Promise<(BudgetRecord & { key: { at: string; id: string } })[]> {
    const q = conn("budgets")
      .where({ user_id: userId, status: "draft", ...(agentPrincipalId && { agent_principal_id: agentPrincipalId }) })
      .select("*", conn.raw("created_at::text AS created_key"))
      .orderBy([{ column: "created_at" }, { column: "id" }]);
    if (page?.after) q.whereRaw(`(created_at, id) > (?::timestamptz, ?::uuid)`, [page.after.at, page.after.id]);
    if (page) q.limit(page.limit);
    const rows = await q;
    return rows.map((r: Record<string, unknown>) => ({ ...toBudget(r), key: { at: String(r.created_key), id: String(r.id) } }));
  },

  /** Installs a draft policy; a closed (frozen) one stays closed. */
  async activatePolicy(conn: Conn, vaultId: string, at: Date) {
    await conn("vault_policies").where({ vault_id: vaultId }).whereNot({ status: "closed" }).update({ status: "active", version: 1, updated_at: at });
  },

  /** Freezes closed budgets' policies: no payment passes them again, and activation leaves them alone. */
  async closePolicies(conn: Conn, vaultIds: string[], at: Date) {
    await conn("vault_policies").whereIn("vault_id", vaultIds).update({ status: "closed", updated_at: at });
  },

  /**
   * The open budgets under a budget's vault, every level down, locked FOR UPDATE top-down
   * (depth, then id): nested closes lock common budgets in one order, ancestors first. A closed
   * budget's own budgets closed with it, so the walk stops there.
   */
  async lockOpenDescendants(trx: Knex.Transaction, userId: string, vaultId: string): Promise<BudgetRecord[]> {
    const { rows } = await trx.raw(
      `WITH RECURSIVE sub (id, vault_id, depth) AS (
         SELECT id, vault_id, 1 FROM budgets WHERE parent_vault_id = ? AND user_id = ? AND status IN ('draft', 'active', 'declined')
         UNION ALL
         SELECT b.id, b.vault_id, s.depth + 1 FROM budgets b JOIN sub s ON b.parent_vault_id = s.vault_id
          WHERE b.user_id = ? AND b.status IN ('draft', 'active', 'declined'))
       SELECT b.* FROM budgets b JOIN sub s ON s.id = b.id ORDER BY s.depth, b.id FOR UPDATE OF b`,
      [vaultId, userId, userId],
    );
    return (rows as Record<string, unknown>[]).map(toBudget);
  },

  /**
   * Every provisioned budget under a budget's vault, all levels down, locked FOR UPDATE
   * top-down (lockOpenDescendants' order), closed ones included: what a sweep reaches.
   */
  async lockDescendants(trx: Knex.Transaction, userId: string, vaultId: string): Promise<BudgetRecord[]> {
    const { rows } = await trx.raw(
      `WITH RECURSIVE sub (id, vault_id, depth) AS (
         SELECT id, vault_id, 1 FROM budgets WHERE parent_vault_id = ? AND user_id = ? AND status IN ('draft', 'active', 'declined', 'closed')
         UNION ALL
         SELECT b.id, b.vault_id, s.depth + 1 FROM budgets b JOIN sub s ON b.parent_vault_id = s.vault_id
          WHERE b.user_id = ? AND b.status IN ('draft', 'active', 'declined', 'closed'))
       SELECT b.* FROM budgets b JOIN sub s ON s.id = b.id ORDER BY s.depth, b.id FOR UPDATE OF b`,
      [vaultId, userId, userId],
    );
    return (rows as Record<string, unknown>[]).map(toBudget);
  },

  /**
   * Marks for ending (budget_endings) the drafts the revoked grants made: all of the user's, or one
   * lineage's; returns every such draft. Takes no budget lock (the revoke holds grant locks), and
   * skips a mark an ending holds, so it never waits on one.
   */
  async markRevokedDrafts(trx: Knex.Transaction, revoked: RevokedGrants, at: Date): Promise<string[]> {
    const lineage = revoked.lineageId !== undefined ? [revoked.lineageId] : [];
    const { rows } = await trx.raw(
      `WITH dead AS (SELECT b.id FROM budgets b WHERE b.user_id = ? AND b.status = 'draft' AND ${GRANT_REVOKED_SQL("b.grant_id", lineage.length > 0 ? "?" : undefined)}),
            marked AS (INSERT INTO budget_endings (budget_id, marked_at)
                       SELECT id, ? FROM dead WHERE NOT EXISTS (SELECT 1 FROM budget_endings e WHERE e.budget_id = dead.id)
                       ON CONFLICT (budget_id) DO NOTHING)
       SELECT id FROM dead`,
      [revoked.userId, ...lineage, at],
    );
    return (rows as { id: string }[]).map((r) => String(r.id));
  },

  /** Takes a budget's ending mark (call it holding the budget row); false when there was none. */
  async takeEnding(trx: Knex.Transaction, budgetId: string): Promise<boolean> {
    const rows = await trx("budget_endings").where({ budget_id: budgetId }).delete().returning("budget_id");
    return rows.length > 0;
  },

  /** Budgets marked for ending, oldest mark first (at most `limit`). */
  async listEndings(conn: Conn, limit: number): Promise<string[]> {
    const rows = await conn("budget_endings").orderBy("marked_at").limit(limit).select("budget_id");
    return rows.map((r: { budget_id: string }) => String(r.budget_id));
  },

  /** Ended budgets whose money went up (a sweep of what they kept): a refund into them follows it. */
  async markSweptUp(conn: Conn, budgets: Pick<BudgetRecord, "id">[], at: Date) {
    const ids = budgets.map((b) => b.id);
    if (ids.length > 0) await conn("budgets").whereIn("id", ids).update({ keeps_funds: false, updated_at: at });
  },

  /**
   * A vault and its ancestors through the budgets they belong to, bottom-up, ending at a vault of no
   * budget; each with its parent, and `sweptUp` when its budget ended and sent its money up.
   */
  async refundPath(conn: Conn, vaultId: string): Promise<{ vaultId: string; parentVaultId: string | null; sweptUp: boolean }[]> {
    const { rows } = await conn.raw(
      `WITH RECURSIVE up (vault_id, depth) AS (
         SELECT ?::uuid, 0
         UNION ALL
         SELECT b.parent_vault_id, u.depth + 1 FROM up u JOIN budgets b ON b.vault_id = u.vault_id)
       SELECT u.vault_id, b.parent_vault_id, (b.status IN ('closed', 'declined') AND NOT b.keeps_funds) AS swept_up
         FROM up u LEFT JOIN budgets b ON b.vault_id = u.vault_id ORDER BY u.depth`,
      [vaultId],
    );
    return (rows as { vault_id: string; parent_vault_id: string | null; swept_up: boolean | null }[]).map((r) => ({
      vaultId: String(r.vault_id),
      parentVaultId: r.parent_vault_id === null ? null : String(r.parent_vault_id),
      sweptUp: r.swept_up === true,
    }));
  },

  /**
   * Closed budgets whose vault still holds money, oldest close first then by vault (at most
   * `limit`), strictly after `after`: a keyset page. The key's time is text, exact to the microsecond.
   */
  async listStranded(
    conn: Conn,
    limit: number,
    after?: StrandedKey,
  ): Promise<{ budget: BudgetRecord; balanceCents: number; currency: string; key: StrandedKey }[]> {
    const { rows } = await conn.raw(
      `SELECT b.*, v.balance_cents AS v_balance_cents, v.currency AS v_currency, b.closed_at::text AS closed_key
         FROM budgets b JOIN vaults v ON v.id = b.vault_id
        WHERE b.status = 'closed' AND v.balance_cents > 0 ${after ? "AND (b.closed_at, b.vault_id) > (?::timestamptz, ?::uuid)" : ""}
        ORDER BY b.closed_at, b.vault_id LIMIT ?`,
      after ? [after.at, after.vaultId, limit] : [limit],
    );
    return (rows as Record<string, unknown>[]).map((r) => ({
      budget: toBudget(r),
      balanceCents: Number(r.v_balance_cents),
      currency: String(r.v_currency),
      key: { at: String(r.closed_key), vaultId: String(r.vault_id) },
    }));
  },
};

export type BudgetsRowStore = typeof budgetsStore;

/** Where a stranded vault sorts (listStranded): when its budget closed, its vault id. */
export interface StrandedKey {
  at: string;
  vaultId: string;
}
