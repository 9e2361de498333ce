import type { Knex } from "knex";
import type { GrantVaultsStore } from "../../grants/stores/vaults.js";

type Conn = Knex | Knex.Transaction;

/** The vault reads a grant or code needs, for the grants room (core.ts hands them over). */
export function createGrantVaultsStore(): GrantVaultsStore {
  return {
    /** The user's vaults, each with its budget's status (null outside any budget), in one read. */
    async vaultsOfUser(
      conn: Conn,
      userId: string,
    ): Promise<{ id: string; parentVaultId: string | null; budgetStatus: string | null; budgetName: string | null }[]> {
      const rows = await conn("vaults as v")
        .leftJoin("budgets as b", "b.vault_id", "v.id")
        .leftJoin("agent_principals as ap", "ap.id", "b.agent_principal_id")
        .where("v.owner_user_id", userId)
        .orderBy("v.created_at")
        .select("v.id", "v.parent_vault_id", "b.status", "ap.display_name");
      return rows.map((r: Record<string, unknown>) => ({
        id: String(r.id),
        parentVaultId: r.parent_vault_id == null ? null : String(r.parent_vault_id),
        budgetStatus: r.status == null ? null : String(r.status),
        budgetName: r.display_name == null ? null : String(r.display_name),
      }));
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
     * Locks the vault's budget row FOR NO KEY UPDATE before any grant or vault lock (the budgets'
     * lock order), so a close or decline either is seen or waits and then revokes the new grant.
     */
    async lockBudgetStatusOfVault(trx: Knex.Transaction, vaultId: string): Promise<string | undefined> {
      const { rows } = await trx.raw(`SELECT status FROM budgets WHERE vault_id = ? FOR NO KEY UPDATE`, [vaultId]);
      const r = (rows as { status: string }[])[0];
      return r?.status;
    },
  };
}
