import type { Knex } from "knex";
import { budgetPrincipals } from "../../grants/stores/agents.js";
import type { Policy } from "../policy.js";
import { toBudget, type BudgetRecord, type Conn, type StepName } from "../records.js";

/** SQL of the provisioning saga: its fence, the parent vault's claim, and each step's resource. */
export const sagaStore = {
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
    await conn.raw(`INSERT INTO vaults (id, owner_user_id, parent_vault_id, currency, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`, [
      v.id,
      v.ownerUserId,
      v.parentVaultId,
      v.currency,
      v.at,
    ]);
  },

  async deleteVault(conn: Conn, id: string) {
    await conn("vaults").where({ id }).delete();
  },

  insertAgentPrincipal: budgetPrincipals.insert,
  deleteAgentPrincipal: budgetPrincipals.delete,

  async insertPolicy(conn: Conn, vaultId: string, purpose: string, p: Policy, version: number, at: Date) {
    await conn.raw(
      `INSERT INTO vault_policies (vault_id, status, version, purpose, amount_cap_cents_per_tx, amount_cap_cents_per_day,
                                   amount_cap_cents_lifetime, step_up_amount_cents, chain_allowlist, time_window_end, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (vault_id) DO NOTHING`,
      [
        vaultId,
        p.status,
        version,
        purpose,
        p.amountCapCentsPerTx,
        p.amountCapCentsPerDay,
        p.amountCapCentsLifetime,
        p.stepUpAmountCents,
        p.chainAllowlist,
        p.timeWindowEnd,
        at,
        at,
      ],
    );
  },

  async deletePolicy(conn: Conn, vaultId: string) {
    await conn("vault_policies").where({ vault_id: vaultId }).delete();
  },

  /** Which of a budget's resources still exist (for cleanup reports). */
  async existing(conn: Conn, b: Pick<BudgetRecord, "vaultId" | "agentPrincipalId">): Promise<StepName[]> {
    const { rows } = await conn.raw(
      `SELECT (SELECT count(*) FROM vaults WHERE id = ?)::int AS vault,
              ${budgetPrincipals.COUNT_SQL}::int AS agent_principal,
              (SELECT count(*) FROM vault_policies WHERE vault_id = ?)::int AS policy`,
      [b.vaultId, b.agentPrincipalId, b.vaultId],
    );
    const r = (rows as Record<StepName, number>[])[0]!;
    return (["vault", "agent_principal", "policy"] as const).filter((k) => Number(r[k]) > 0);
  },
};

export type SagaStore = typeof sagaStore;
