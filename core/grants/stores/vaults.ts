import type { Knex } from "knex";

type Conn = Knex | Knex.Transaction;

/** The vault reads a grant or code needs: the budgets room's (vaults and budgets are its tables), handed over by core.ts. */
export interface GrantVaultsStore {
  /** The user's vaults, each with its budget's status and agent's name (null outside any budget), in one read. */
  vaultsOfUser(conn: Conn, userId: string): Promise<{ id: string; parentVaultId: string | null; budgetStatus: string | null; budgetName: string | null }[]>;
  /** The owner of a vault; with `lock`, its row held FOR KEY SHARE so a cleanup deleting it is ordered against the caller. */
  vaultOwner(conn: Conn, vaultId: string, lock?: boolean): Promise<string | undefined>;
  /** The status of the vault's budget, its row locked first in the budgets' lock order (FOR NO KEY UPDATE). */
  lockBudgetStatusOfVault(trx: Knex.Transaction, vaultId: string): Promise<string | undefined>;
}
