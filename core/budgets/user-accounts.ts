import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import type { UsersStore } from "../identity/users-store.js";
import { vaultsStore } from "./stores/vaults.js";

export interface UserAccount {
  userId: string;
  vaultId: string;
  created: boolean;
}

/**
 * The user of an (already normalised) e-mail with their root vault, both made in `trx` if the
 * address is new. Identity keeps the user; the vault is ours, as every vault is.
 */
export async function ensureUserAccount(trx: Knex.Transaction, users: Pick<UsersStore, "ensureUser">, email: string, at: Date): Promise<UserAccount> {
  const user = await users.ensureUser(trx, { id: randomUUID(), email, at });
  if (user.created) {
    const vaultId = randomUUID();
    await vaultsStore.openRootVault(trx, { id: vaultId, ownerUserId: user.userId, at });
    return { userId: user.userId, vaultId, created: true };
  }
  const vaultId = await vaultsStore.rootVaultOf(trx, user.userId);
  if (!vaultId) throw new Error(`user ${user.userId} has no root vault`);
  return { userId: user.userId, vaultId, created: false };
}
