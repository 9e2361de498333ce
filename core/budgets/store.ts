import type { Knex } from "knex";
import type { Policy } from "./policy.js";
import type { Db } from "../db/knex.js";
import { createGroupCommit } from "../db/group-commit.js";
import { pgArray, prepared } from "../db/sql.js";
import { UUID } from "../uuid.js";
import { accountId, externalAccount, vaultAccount } from "../ledger/accounts.js";
import { movementCtes } from "../ledger/store.js";

type Conn = Knex | Knex.Transaction;

export type BudgetStatusName = "provisioning" | "failed" | "cleanup_pending" | "draft" | "active" | "declined" | "closed";
/** The statuses of a budget whose saga finished: it has a vault, an agent principal and a policy. */
export const PROVISIONED: readonly BudgetStatusName[] = ["draft", "active", "declined", "closed"];
export type StepName = "vault" | "agent_principal" | "policy";
export type StepState = "pending" | "done" | "failed" | "compensated" | "compensation_failed";

export interface BudgetParams {
  purpose: string;
  displayName: string;
  amountCapCentsPerTx: number | null;
  amountCapCentsPerDay: number | null;
  amountCapCentsLifetime: number | null;
  stepUpAmountCents: number | null;
  chainAllowlist: string[];
  timeWindowEnd: string | null;
}

export interface BudgetRecord {
  id: string;
  parentVaultId: string;
  userId: string;
  parentAgentId: string | null;
  grantId: string;
  idempotencyKey: string;
  paramsHash: string;
  params: BudgetParams;
  agentPrincipalId: string;
  vaultId: string;
  status: BudgetStatusName;
  policyVersion: number;
  attempt: number;
  steps: { name: StepName; state: StepState }[];
  remaining: string[];
  createdAt: Date;
  updatedAt: Date;
  /** When CloseBudget closed it; null before. */
  closedAt: Date | null;
}

export interface VaultRecord {
  id: string;
  ownerUserId: string;
  parentVaultId: string | null;
  balanceCents: number;
  currency: string;
}

export type PaymentStatusName = "pending_step_up" | "approved" | "completed" | "declined";

export interface PaymentRecord {
  id: string;
  vaultId: string;
  userId: string;
  agentPrincipalId: string | null;
  grantId: string;
  idempotencyKey: string;
  paramsHash: string;
  address: string;
  chain: string;
  token: string;
  amountCents: number;
  currency: string;
  status: PaymentStatusName;
  createdAt: Date;
}

/** A grant as an agent call acts under it, read from the database (never from the caller). */
export interface AgentGrant {
  id: string;
  userId: string;
  agentPrincipalId: string;
  vaultId: string;
  scopes: string[];
  state: string;
  stepUp: boolean;
  authTime: Date | null;
  expiresAt: Date;
  userActive: boolean;
}

const GRANT_COLUMNS = `g.id AS g_id, g.user_id AS g_user_id, g.agent_principal_id AS g_agent_principal_id, g.vault_id AS g_vault_id,
                g.scopes AS g_scopes, g.state AS g_state, g.step_up AS g_step_up, g.auth_time AS g_auth_time,
                g.expires_at AS g_expires_at, (u.status = 'active') AS g_user_active`;

/** The vault columns toVault reads (named, not v.*: the statements reading them are prepared). */
const VAULT_COLUMNS = `v.id, v.owner_user_id, v.parent_vault_id, v.balance_cents, v.currency`;

function toAgentGrant(r: Record<string, unknown>): AgentGrant {
  return {
    id: String(r.g_id),
    userId: String(r.g_user_id),
    agentPrincipalId: String(r.g_agent_principal_id),
    vaultId: String(r.g_vault_id),
    scopes: r.g_scopes as string[],
    state: String(r.g_state),
    stepUp: Boolean(r.g_step_up),
    authTime: r.g_auth_time ? date(r.g_auth_time) : null,
    expiresAt: date(r.g_expires_at),
    userActive: Boolean(r.g_user_active),
  };
}

/** The UTC calendar day of an instant, as a SQL date literal (YYYY-MM-DD). */
const utcDay = (at: Date) => at.toISOString().slice(0, 10);
const date = (v: unknown) => (v instanceof Date ? v : new Date(String(v)));
const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

function toBudget(r: Record<string, unknown>): BudgetRecord {
  return {
    id: String(r.id),
    parentVaultId: String(r.parent_vault_id),
    userId: String(r.user_id),
    parentAgentId: r.parent_agent_id ? String(r.parent_agent_id) : null,
    grantId: String(r.grant_id),
    idempotencyKey: String(r.idempotency_key),
    paramsHash: String(r.params_hash),
    params: (typeof r.params === "string" ? JSON.parse(r.params) : r.params) as BudgetParams,
    agentPrincipalId: String(r.agent_principal_id),
    vaultId: String(r.vault_id),
    status: r.status as BudgetStatusName,
    policyVersion: Number(r.policy_version),
    attempt: Number(r.attempt),
    steps: (typeof r.steps === "string" ? JSON.parse(r.steps) : r.steps) as BudgetRecord["steps"],
    remaining: (r.remaining as string[]) ?? [],
    createdAt: date(r.created_at),
    updatedAt: date(r.updated_at),
    closedAt: r.closed_at ? date(r.closed_at) : null,
  };
}

function toVault(r: Record<string, unknown>): VaultRecord {
  return {
    id: String(r.id),
    ownerUserId: String(r.owner_user_id),
    parentVaultId: r.parent_vault_id ? String(r.parent_vault_id) : null,
    balanceCents: Number(r.balance_cents),
    currency: String(r.currency),
  };
}

function toPolicy(r: Record<string, unknown>): Policy {
  return {
    status: r.status as Policy["status"],
    amountCapCentsPerTx: num(r.amount_cap_cents_per_tx),
    amountCapCentsPerDay: num(r.amount_cap_cents_per_day),
    amountCapCentsLifetime: num(r.amount_cap_cents_lifetime),
    stepUpAmountCents: num(r.step_up_amount_cents),
    chainAllowlist: r.chain_allowlist as string[],
    timeWindowEnd: r.time_window_end ? date(r.time_window_end) : null,
  };
}

function toPayment(r: Record<string, unknown>): PaymentRecord {
  return {
    id: String(r.id),
    vaultId: String(r.vault_id),
    userId: String(r.user_id),
    agentPrincipalId: r.agent_principal_id ? String(r.agent_principal_id) : null,
    grantId: String(r.grant_id),
    idempotencyKey: String(r.idempotency_key),
    paramsHash: String(r.params_hash),
    address: String(r.address),
    chain: String(r.chain),
    token: String(r.token),
    amountCents: Number(r.amount_cents),
    currency: String(r.currency),
    status: r.status as PaymentStatusName,
    createdAt: date(r.created_at),
  };
}

/**
 * Today's completed spend (every completion since the reader's UTC midnight, `d` a SQL
 * date) from the vault row's running totals (migration 0018): nothing when the row's
 * spend day is earlier, that day's total when it is today, and the last two days' when
 * the row is already a day ahead (a payment stamped before midnight decided after one
 * stamped after it). A reader further behind (a clock set back over a day) counts the
 * whole lifetime, erring towards refusal.
 */
export const spentTodaySql = (d: string) =>
  `(CASE WHEN v.spent_day IS NULL OR v.spent_day < ${d} THEN 0 WHEN v.spent_day = ${d} THEN v.spent_day_cents
         WHEN v.spent_day = ${d} + 1 THEN v.spent_day_cents + v.spent_prev_day_cents ELSE v.spent_lifetime_cents END)`;

/** The clock skew allowed on an agent token's expiry (the service's CLOCK_SKEW_MS). */
const SKEW_SECONDS = 30;

/** One payments.simulate read; `audit` asks for its success row, written when the call answers. */
interface SimulateRead {
  grantId: string;
  dayStart: Date;
  audit?: { requestId: string; at: Date; currency: string };
}

/**
 * Locks vault rows FOR UPDATE in id order, the one order every caller locking more than
 * one vault uses (fund and decline lock a budget's vault and its parent; close locks the
 * vaults of every budget it closes and the top one's parent), so two of them never wait on
 * each other in a cycle. A payment locks one vault only. The rows are sorted before they
 * are locked (ORDER BY runs below the lock), so the order holds.
 */
async function lockVaults(trx: Knex.Transaction, ids: string[]): Promise<Map<string, VaultRecord>> {
  const { rows } = await trx.raw(`SELECT * FROM vaults WHERE id = ANY(?::uuid[]) ORDER BY id FOR UPDATE`, [pgArray(ids)]);
  return new Map((rows as Record<string, unknown>[]).map((r) => [String(r.id), toVault(r)]));
}

/** SQL for budgets, vault policies, provisioning claims, vault balances and agent payments. */
export function createBudgetsStore(db: Db) {
  // payments.simulate's read: the grant and everything its decision needs, for many
  // concurrent calls in one statement (group commit); each statement's snapshot starts
  // after all of its calls arrived, so a revocation committed before a call is seen.
  // The same statement inserts each call's success audit row, guarded by the checks the
  // service makes before answering (grant usable, vault the grant user's, currency):
  // when it resolves the rows are committed, and a row exists exactly when the call may
  // answer. A failing INSERT fails the statement, so no read answers unaudited.
  const contextsWithAudit = prepared(
    "payment_context",
    `WITH ctx AS (
           SELECT k.n, k.k_audit, k.k_request_id, k.k_at, ${GRANT_COLUMNS}, ${VAULT_COLUMNS}, p.status AS p_status, p.amount_cap_cents_per_tx, p.amount_cap_cents_per_day, p.amount_cap_cents_lifetime,
                  p.step_up_amount_cents, p.chain_allowlist, p.time_window_end, p.vault_id AS p_vault_id,
                  ${spentTodaySql("(k.day_start AT TIME ZONE 'UTC')::date")} AS spent_today, v.spent_lifetime_cents AS spent_lifetime,
                  (g.state = 'active' AND u.status = 'active' AND g.expires_at + interval '${SKEW_SECONDS} seconds' >= k.k_at
                   AND v.owner_user_id = g.user_id AND v.currency = k.k_currency) AS answers
             FROM unnest(?::uuid[], ?::timestamptz[], ?::boolean[], ?::text[], ?::timestamptz[], ?::text[])
                  WITH ORDINALITY AS k(grant_id, day_start, k_audit, k_request_id, k_at, k_currency, n)
             JOIN grants g ON g.id = k.grant_id JOIN users u ON u.id = g.user_id
             JOIN vaults v ON v.id = g.vault_id LEFT JOIN vault_policies p ON p.vault_id = v.id),
         audited AS (
           INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
           SELECT k_request_id, 'agent:' || g_agent_principal_id, 'payments.simulate', 'success', '', id::text, k_at
             FROM ctx WHERE k_audit AND answers ORDER BY n
           RETURNING seq)
         SELECT ctx.*, (k_audit AND answers) AS audited FROM ctx`,
  );
  const unlockedContexts = createGroupCommit<SimulateRead, (PaymentContext & { grant: AgentGrant; audited: boolean }) | undefined>(
    async (keys) => {
      const rows = await contextsWithAudit(db, [
        pgArray(keys.map((k) => k.grantId)),
        pgArray(keys.map((k) => k.dayStart.toISOString())),
        pgArray(keys.map((k) => String(k.audit !== undefined))),
        pgArray(keys.map((k) => k.audit?.requestId ?? "")),
        pgArray(keys.map((k) => (k.audit?.at ?? k.dayStart).toISOString())),
        pgArray(keys.map((k) => k.audit?.currency ?? "")),
      ]);
      const found = new Map<number, Record<string, unknown>>();
      for (const r of rows) found.set(Number(r.n) - 1, r);
      return keys.map((_, i) => {
        const r = found.get(i);
        return r ? { ...toPaymentContext(r), grant: toAgentGrant(r), audited: r.audited === true } : undefined;
      });
    },
    { maxBatch: 256, maxInFlight: 2, name: "payment_context" },
  );

  const lockedGrantAndVault = prepared(
    "locked_payment_context",
    `SELECT ${GRANT_COLUMNS}, ${VAULT_COLUMNS}, ${spentTodaySql("d.day")} AS spent_today, v.spent_lifetime_cents AS spent_lifetime
       FROM (SELECT ?::date AS day) d, grants g JOIN users u ON u.id = g.user_id JOIN vaults v ON v.id = g.vault_id
      WHERE g.id = ? FOR NO KEY UPDATE OF g FOR UPDATE OF v`,
  );
  const policyOf = prepared(
    "payment_policy",
    `SELECT p.status AS p_status, p.amount_cap_cents_per_tx, p.amount_cap_cents_per_day, p.amount_cap_cents_lifetime,
            p.step_up_amount_cents, p.chain_allowlist, p.time_window_end, p.vault_id AS p_vault_id
       FROM (SELECT 1) one LEFT JOIN vault_policies p ON p.vault_id = ?`,
  );

  return {
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

    /** Inserts unless the key exists under the parent vault; `inserted` says which. */
    async insertBudget(trx: Conn, b: BudgetRecord): Promise<{ inserted: boolean }> {
      const { rows } = await trx.raw(
        `INSERT INTO budgets (id, parent_vault_id, user_id, parent_agent_id, grant_id, idempotency_key, params_hash, params,
                              agent_principal_id, vault_id, status, policy_version, attempt, steps, remaining, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?)
         ON CONFLICT (parent_vault_id, idempotency_key) DO NOTHING RETURNING id`,
        [
          b.id, b.parentVaultId, b.userId, b.parentAgentId, b.grantId, b.idempotencyKey, b.paramsHash, JSON.stringify(b.params),
          b.agentPrincipalId, b.vaultId, b.status, b.policyVersion, b.attempt, JSON.stringify(b.steps), b.remaining, b.createdAt, b.updatedAt,
        ],
      );
      return { inserted: (rows as unknown[]).length > 0 };
    },

    async updateBudget(
      conn: Conn,
      id: string,
      fields: Partial<Pick<BudgetRecord, "status" | "policyVersion" | "steps" | "remaining" | "grantId" | "attempt" | "closedAt">>,
      at: Date,
    ): Promise<BudgetRecord> {
      const patch: Record<string, unknown> = { updated_at: at };
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

    /** Locks a budget row and says whether `attempt` still owns its saga. */
    async holdsAttempt(trx: Knex.Transaction, id: string, attempt: number): Promise<boolean> {
      const row = await trx("budgets").where({ id }).forUpdate().first("attempt", "status");
      return Boolean(row) && Number(row.attempt) === attempt && row.status === "provisioning";
    },

    /** Budgets whose cleanup is unfinished, or whose saga was abandoned before `staleBefore`. */
    async listReapable(conn: Conn, staleBefore: Date): Promise<BudgetRecord[]> {
      // The statuses as literals, matching the unfinished-budgets partial index in any plan.
      const rows = await conn("budgets")
        .whereRaw(`(status = 'cleanup_pending' OR (status = 'provisioning' AND updated_at < ?))`, [staleBefore])
        .orderBy("updated_at")
        .limit(100);
      return rows.map(toBudget);
    },

    /**
     * A user's draft budgets, oldest first (created_at, id); with `page`, at most `limit`
     * strictly after `after` (a created_at as PostgreSQL prints it, and an id). Each row's
     * `key` is its position, for the next page's cursor.
     */
    async listDraftBudgets(conn: Conn, userId: string, page?: { limit: number; after?: { at: string; id: string } }): Promise<(BudgetRecord & { key: { at: string; id: string } })[]> {
      const q = conn("budgets").where({ user_id: userId, status: "draft" }).select("*", conn.raw("created_at::text AS created_key")).orderBy([{ column: "created_at" }, { column: "id" }]);
      if (page?.after) q.whereRaw(`(created_at, id) > (?::timestamptz, ?::uuid)`, [page.after.at, page.after.id]);
      if (page) q.limit(page.limit);
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({ ...toBudget(r), key: { at: String(r.created_key), id: String(r.id) } }));
    },

    /** Claims the parent vault for one provisioning sequence; false when another holds it. */
    async claimVault(conn: Conn, vaultId: string, budgetId: string, at: Date): Promise<boolean> {
      const { rows } = await conn.raw(
        `INSERT INTO vault_provisioning_claims (vault_id, budget_id, claimed_at) VALUES (?, ?, ?)
         ON CONFLICT (vault_id) DO NOTHING RETURNING vault_id`,
        [vaultId, budgetId, at],
      );
      return (rows as unknown[]).length > 0;
    },

    async releaseClaim(conn: Conn, vaultId: string, budgetId: string): Promise<void> {
      await conn("vault_provisioning_claims").where({ vault_id: vaultId, budget_id: budgetId }).delete();
    },

    // Saga steps: each insert is idempotent (a retry re-runs it), each delete is too.
    async insertChildVault(conn: Conn, v: { id: string; ownerUserId: string; parentVaultId: string; currency: string; at: Date }) {
      await conn.raw(
        `INSERT INTO vaults (id, owner_user_id, parent_vault_id, currency, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
        [v.id, v.ownerUserId, v.parentVaultId, v.currency, v.at],
      );
    },
    async deleteVault(conn: Conn, id: string) {
      await conn("vaults").where({ id }).delete();
    },
    async insertAgentPrincipal(conn: Conn, a: { id: string; userId: string; parentAgentId: string | null; vaultId: string; displayName: string; at: Date }) {
      await conn.raw(
        `INSERT INTO agent_principals (id, user_id, parent_agent_id, vault_id, display_name, created_at) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO NOTHING`,
        [a.id, a.userId, a.parentAgentId, a.vaultId, a.displayName, a.at],
      );
    },
    async deleteAgentPrincipal(conn: Conn, id: string) {
      await conn("agent_principals").where({ id }).delete();
    },
    async insertPolicy(conn: Conn, vaultId: string, purpose: string, p: Policy, version: number, at: Date) {
      await conn.raw(
        `INSERT INTO vault_policies (vault_id, status, version, purpose, amount_cap_cents_per_tx, amount_cap_cents_per_day,
                                     amount_cap_cents_lifetime, step_up_amount_cents, chain_allowlist, time_window_end, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (vault_id) DO NOTHING`,
        [vaultId, p.status, version, purpose, p.amountCapCentsPerTx, p.amountCapCentsPerDay, p.amountCapCentsLifetime, p.stepUpAmountCents,
          p.chainAllowlist, p.timeWindowEnd, at, at],
      );
    },
    async deletePolicy(conn: Conn, vaultId: string) {
      await conn("vault_policies").where({ vault_id: vaultId }).delete();
    },
    /** Installs a draft policy; a closed (frozen) one stays closed. */
    async activatePolicy(conn: Conn, vaultId: string, at: Date) {
      await conn("vault_policies").where({ vault_id: vaultId }).whereNot({ status: "closed" }).update({ status: "active", version: 1, updated_at: at });
    },
    /** Freezes closed budgets' policies: no payment passes them again, and activation leaves them alone. */
    async closePolicies(conn: Conn, vaultIds: string[], at: Date) {
      await conn("vault_policies").whereIn("vault_id", vaultIds).update({ status: "closed", updated_at: at });
    },

    /** Which of a budget's resources still exist (for cleanup reports). */
    async existing(conn: Conn, b: Pick<BudgetRecord, "vaultId" | "agentPrincipalId">): Promise<StepName[]> {
      const { rows } = await conn.raw(
        `SELECT (SELECT count(*) FROM vaults WHERE id = ?)::int AS vault,
                (SELECT count(*) FROM agent_principals WHERE id = ?)::int AS agent_principal,
                (SELECT count(*) FROM vault_policies WHERE vault_id = ?)::int AS policy`,
        [b.vaultId, b.agentPrincipalId, b.vaultId],
      );
      const r = (rows as Record<StepName, number>[])[0]!;
      return (["vault", "agent_principal", "policy"] as const).filter((k) => Number(r[k]) > 0);
    },

    async findVault(conn: Conn, id: string, lock = false): Promise<VaultRecord | undefined> {
      const q = conn("vaults").where({ id }).first();
      const row = lock ? await q.forUpdate() : await q;
      return row ? toVault(row) : undefined;
    },

    /**
     * Moves money into a vault and records it in the ledger in one statement: `from` is
     * debited (external:funding for the operator's funding, the parent vault for a budget
     * allocation). `movementId` is the ledger transaction's id.
     */
    async fundVault(trx: Knex.Transaction, vault: Pick<VaultRecord, "id" | "currency">, amountCents: number, movement: { id: string; kind: "vault.fund"; reference: string; at: Date }): Promise<VaultRecord> {
      const ledger = movementCtes({
        ...movement,
        legs: [
          { account: externalAccount("funding", vault.currency), amountCents: -amountCents },
          { account: vaultAccount(vault.id, vault.currency), amountCents },
        ],
      });
      const { rows } = await trx.raw(`WITH ${ledger.sql} UPDATE vaults SET balance_cents = balance_cents + ? WHERE id = ? RETURNING *`, [
        ...ledger.bindings,
        amountCents,
        vault.id,
      ]);
      return toVault((rows as Record<string, unknown>[])[0]!);
    },

    /** Locks vault rows FOR UPDATE in id order (see lockVaults above). */
    lockVaults,

    /**
     * Moves money between two vaults of one currency (a budget's funding or its sweep) and
     * records it as one ledger transaction (`from` debited, `to` credited), in one
     * statement. Both rows must be held FOR UPDATE (lockVaults) and `from` must hold the
     * amount. The balances move only when the ledger transaction is new: a movement whose
     * id is already in the ledger moves nothing and `moved` is false.
     */
    async moveBetweenVaults(
      trx: Knex.Transaction,
      from: Pick<VaultRecord, "id" | "currency">,
      to: Pick<VaultRecord, "id" | "currency">,
      amountCents: number,
      movement: { id: string; kind: "budget.fund" | "budget.sweep"; reference: string; at: Date },
    ): Promise<{ moved: boolean; from: VaultRecord; to: VaultRecord }> {
      if (from.currency !== to.currency) throw new Error(`cannot move ${from.currency} into a ${to.currency} vault`);
      const ledger = movementCtes({
        ...movement,
        legs: [
          { account: vaultAccount(from.id, from.currency), amountCents: -amountCents },
          { account: vaultAccount(to.id, to.currency), amountCents },
        ],
      });
      const { rows } = await trx.raw(
        `WITH ${ledger.sql},
         moved AS (
           UPDATE vaults v SET balance_cents = v.balance_cents + d.delta
             FROM (VALUES (?::uuid, ?::bigint), (?::uuid, ?::bigint)) d (id, delta)
            WHERE v.id = d.id AND EXISTS (SELECT 1 FROM ledger_tx)
           RETURNING v.*)
         SELECT * FROM moved`,
        [...ledger.bindings, from.id, -amountCents, to.id, amountCents],
      );
      const after = new Map((rows as Record<string, unknown>[]).map((r) => [String(r.id), toVault(r)]));
      if (after.size === 0) {
        const current = await lockVaults(trx, [from.id, to.id]);
        return { moved: false, from: current.get(from.id)!, to: current.get(to.id)! };
      }
      return { moved: true, from: after.get(from.id)!, to: after.get(to.id)! };
    },

    /**
     * A ledger transaction by id, with what it moved on one account (the sum of its legs
     * there). For replays of a budget funding: the transaction's legs are found through the
     * account's index, so this reads the account's postings, never the whole ledger.
     */
    async findTransfer(conn: Conn, id: string, account: { vaultId: string; currency: string }): Promise<{ kind: string; amountCents: number } | undefined> {
      const { rows } = await conn.raw(
        `SELECT t.kind, (SELECT coalesce(sum(p.amount_cents), 0) FROM ledger_postings p WHERE p.account_id = ? AND p.transaction_id = t.id)::text AS amount
           FROM ledger_transactions t WHERE t.id = ?`,
        [accountId("vault", account.vaultId.toLowerCase(), account.currency), id],
      );
      const r = (rows as Record<string, unknown>[])[0];
      return r ? { kind: String(r.kind), amountCents: Number(r.amount) } : undefined;
    },

    /**
     * Revokes every grant on a vault that is not revoked yet (active ones, and superseded
     * ones whose refresh token could otherwise mint a new grant), as the dashboard's
     * revocation writes it; returns how many. Reached through the user's index (grants
     * have none on vault_id), in the same order as the kill switch's UPDATE.
     */
    async revokeVaultGrants(trx: Knex.Transaction, userId: string, vaultIds: string[], at: Date, reason: string): Promise<number> {
      return trx("grants")
        .where({ user_id: userId })
        .whereIn("vault_id", vaultIds)
        .whereNot({ state: "revoked" })
        .update({ state: "revoked", state_changed_at: at, state_reason: reason });
    },

    /** Declines every payment of these vaults that has not completed (waiting for approval, or approved and not yet repeated); returns how many. */
    async declineOpenPayments(trx: Knex.Transaction, vaultIds: string[], at: Date): Promise<number> {
      // The statuses as literals, matching the open-payments partial index in any plan.
      return trx("agent_payments").whereIn("vault_id", vaultIds).whereRaw(`status IN ('pending_step_up', 'approved')`).update({ status: "declined", declined_at: at });
    },

    /**
     * The budgets under a budget's vault that are not closed, every level down (a budget's
     * agent may have made budgets of its own), locked FOR UPDATE top-down: by depth, then
     * id. Two closes of nested budgets lock their common budgets in the same order, and
     * both lock an ancestor before its descendants, as a single budget's fund or close does.
     * A closed budget's own budgets were closed with it, so the walk stops there.
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

    /** Closed budgets whose vault still holds money, oldest close first (at most `limit`). */
    async listStranded(conn: Conn, limit: number): Promise<{ budget: BudgetRecord; balanceCents: number; currency: string }[]> {
      const { rows } = await conn.raw(
        `SELECT b.*, v.balance_cents AS v_balance_cents, v.currency AS v_currency FROM budgets b JOIN vaults v ON v.id = b.vault_id
          WHERE b.status = 'closed' AND v.balance_cents > 0 ORDER BY b.closed_at, b.id LIMIT ?`,
        [limit],
      );
      return (rows as Record<string, unknown>[]).map((r) => ({ budget: toBudget(r), balanceCents: Number(r.v_balance_cents), currency: String(r.v_currency) }));
    },

    async findPayment(conn: Conn, vaultId: string, idempotencyKey: string): Promise<PaymentRecord | undefined> {
      const row = await conn("agent_payments").where({ vault_id: vaultId, idempotency_key: idempotencyKey }).first();
      return row ? toPayment(row) : undefined;
    },

    /**
     * Takes a completed payment off the vault's balance and adds it to the running totals
     * the caps are checked against, in one UPDATE. Call it in the transaction that completes
     * the payment, holding the vault row FOR UPDATE (lockPaymentContext): the totals then
     * equal the sum of the vault's completed payments at every commit. A payment on a later
     * UTC day than the row's spend day starts the day afresh (the old day becomes the
     * previous day when it is the day before); one dated the day before the row's spend day
     * (stamped before midnight, decided after) adds to the previous day; one dated earlier
     * still (a clock set back) counts towards the lifetime only.
     */
    async recordSpend(trx: Knex.Transaction, vault: Pick<VaultRecord, "id" | "currency">, payment: Pick<PaymentRecord, "id" | "amountCents">, at: Date): Promise<void> {
      // With the payment's ledger transaction (vault -> external:payments): migration 0020.
      await trx.raw(`SELECT vault_record_spend(?, ?, ?, ?, ?::date, ?)`, [vault.id, vault.currency, payment.id, payment.amountCents, utcDay(at), at]);
    },

    async findPaymentById(conn: Conn, id: string, lock = false): Promise<PaymentRecord | undefined> {
      const q = conn("agent_payments").where({ id }).first();
      const row = lock ? await q.forUpdate() : await q;
      return row ? toPayment(row) : undefined;
    },

    async insertPayment(conn: Conn, p: PaymentRecord): Promise<void> {
      await conn("agent_payments").insert({
        id: p.id,
        vault_id: p.vaultId,
        user_id: p.userId,
        agent_principal_id: p.agentPrincipalId,
        grant_id: p.grantId,
        idempotency_key: p.idempotencyKey,
        params_hash: p.paramsHash,
        address: p.address,
        chain: p.chain,
        token: p.token,
        amount_cents: p.amountCents,
        currency: p.currency,
        status: p.status,
        created_at: p.createdAt,
        completed_at: p.status === "completed" ? p.createdAt : null,
      });
    },

    async setPaymentStatus(conn: Conn, id: string, status: PaymentStatusName, at: Date): Promise<PaymentRecord> {
      const patch: Record<string, unknown> = { status };
      if (status === "approved") patch.approved_at = at;
      if (status === "completed") patch.completed_at = at;
      if (status === "declined") patch.declined_at = at;
      const [row] = await conn("agent_payments").where({ id }).update(patch).returning("*");
      return toPayment(row);
    },

    /**
     * The grant an agent call acts under, read afresh. With `lock` (inside the transaction
     * that acts on it) the row is locked FOR NO KEY UPDATE: a revocation (an UPDATE of the
     * row) waits for this transaction, so one that committed first is always seen and none
     * can commit in between. Not FOR SHARE: a stream of share lockers can overtake a
     * waiting UPDATE for ever (they are compatible with each other), which would starve a
     * revocation under load; exclusive lockers queue in order. Calls on one grant are
     * ordered by their vault's lock anyway, so this costs no concurrency. A non-UUID id
     * names no grant.
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
     * Everything a payment decision reads, for a payment that will be made: the grant
     * (locked as in findGrant) and its vault (locked for update: every payment of the
     * vault is ordered by this lock) with its balance and running spend totals, then, in
     * a second statement whose snapshot starts after both locks are held, the policy.
     * The vault columns come from the locked row's latest version (a row lock waits for
     * and then reads the committed update of the payment before), so the totals include
     * every payment committed before the lock was granted; no payment history is read.
     */
    async lockPaymentContext(trx: Knex.Transaction, grantId: string, dayStart: Date): Promise<(PaymentContext & { grant: AgentGrant }) | undefined> {
      if (!UUID.test(grantId)) return undefined;
      const head = (await lockedGrantAndVault(trx, [utcDay(dayStart), grantId.toLowerCase()]))[0];
      if (!head) return undefined;
      const rows = await policyOf(trx, [String(head.id)]);
      return { ...toPaymentContext({ ...head, ...rows[0] }), grant: toAgentGrant(head) };
    },

    /**
     * The simulate read: the grant and its payment context without locks, read afresh
     * for every call; concurrent calls share one statement (group commit). A non-UUID id
     * names no grant.
     */
    currentPaymentContext(
      grantId: string,
      dayStart: Date,
      audit?: SimulateRead["audit"],
    ): Promise<(PaymentContext & { grant: AgentGrant; audited: boolean }) | undefined> {
      return UUID.test(grantId) ? unlockedContexts({ grantId: grantId.toLowerCase(), dayStart, audit }) : Promise.resolve(undefined);
    },

    /**
     * How many items of a vault wait for its owner: payments awaiting step-up approval and
     * draft budgets made under it, each count stopping at `cap` (found by partial indexes,
     * never by reading the vault's history). Call it holding the vault row FOR UPDATE, the
     * lock every payment and every budget's final transaction takes, so the count holds.
     */
    async countAwaitingOwner(trx: Knex.Transaction, vaultId: string, cap: number): Promise<number> {
      const { rows } = await trx.raw(
        `SELECT (SELECT count(*) FROM (SELECT 1 FROM agent_payments WHERE vault_id = ? AND status = 'pending_step_up' LIMIT ?) p)
              + (SELECT count(*) FROM (SELECT 1 FROM budgets WHERE parent_vault_id = ? AND status = 'draft' LIMIT ?) b) AS n`,
        [vaultId, cap, vaultId, cap],
      );
      return Number((rows as { n: unknown }[])[0]!.n);
    },

    /** A user's payments awaiting approval, oldest first; paged as listDraftBudgets. */
    async listPendingPayments(conn: Conn, userId: string, page?: { limit: number; after?: { at: string; id: string } }): Promise<(PaymentRecord & { key: { at: string; id: string } })[]> {
      // The status as a literal, matching the pending-payments partial index in any plan.
      const q = conn("agent_payments")
        .where({ user_id: userId })
        .whereRaw(`status = 'pending_step_up'`)
        .select("*", conn.raw("created_at::text AS created_key"))
        .orderBy([{ column: "created_at" }, { column: "id" }]);
      if (page?.after) q.whereRaw(`(created_at, id) > (?::timestamptz, ?::uuid)`, [page.after.at, page.after.id]);
      if (page) q.limit(page.limit);
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({ ...toPayment(r), key: { at: String(r.created_key), id: String(r.id) } }));
    },

  };
}

export type BudgetsStore = ReturnType<typeof createBudgetsStore>;

export type PaymentContext = ReturnType<typeof toPaymentContext>;

function toPaymentContext(r: Record<string, unknown>) {
  return {
    vault: toVault(r),
    policy: r.p_vault_id ? toPolicy({ ...r, status: r.p_status }) : undefined,
    usage: { today: Number(r.spent_today), lifetime: Number(r.spent_lifetime) },
  };
}
