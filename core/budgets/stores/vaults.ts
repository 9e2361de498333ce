import type { Knex } from "knex";
import { pgArray } from "../../db/sql.js";
import { externalAccount, vaultAccount } from "../../ledger/accounts.js";
import { transactionOnAccount } from "../../ledger/reads.js";
import { movementCtes } from "../../ledger/store.js";
import { toVault, type Conn, type VaultRecord } from "../records.js";

/**
 * Locks vault rows FOR UPDATE in id order, the one order every caller locking several vaults
 * uses, so two never wait on each other in a cycle (a payment locks one vault only). ORDER BY
 * runs below the lock, so the rows are locked in that order.
 */
async function lockVaults(trx: Knex.Transaction, ids: string[]): Promise<Map<string, VaultRecord>> {
  const { rows } = await trx.raw(`SELECT * FROM vaults WHERE id = ANY(?::uuid[]) ORDER BY id FOR UPDATE`, [pgArray(ids)]);
  return new Map((rows as Record<string, unknown>[]).map((r) => [String(r.id), toVault(r)]));
}

/** SQL for vault rows and the ledger movements between them. */
export const vaultsStore = {
  async findVault(conn: Conn, id: string, lock = false): Promise<VaultRecord | undefined> {
    const q = conn("vaults").where({ id }).first();
    const row = lock ? await q.forUpdate() : await q;
    return row ? toVault(row) : undefined;
  },

  /** Opens a user's root vault, the one money arrives in (its ledger accounts open with it). */
  async openRootVault(trx: Knex.Transaction, v: { id: string; ownerUserId: string; at: Date }): Promise<void> {
    await trx.raw(`INSERT INTO vaults (id, owner_user_id, created_at) VALUES (?, ?, ?)`, [v.id, v.ownerUserId, v.at]);
  },

  /** The user's root vault: their oldest vault with no parent. */
  async rootVaultOf(conn: Conn, userId: string): Promise<string | undefined> {
    const { rows } = await conn.raw(`SELECT id FROM vaults WHERE owner_user_id = ? AND parent_vault_id IS NULL ORDER BY created_at LIMIT 1`, [userId]);
    const row = (rows as { id: string }[])[0];
    return row ? String(row.id) : undefined;
  },

  /** The currency of each of these vaults, in one statement. */
  async currenciesOf(conn: Conn, ids: string[]): Promise<Map<string, string>> {
    if (ids.length === 0) return new Map();
    const { rows } = await conn.raw(`SELECT id, currency FROM vaults WHERE id = ANY(?::uuid[])`, [pgArray(ids)]);
    return new Map((rows as { id: string; currency: string }[]).map((r) => [String(r.id), String(r.currency)]));
  },

  /**
   * Moves money into a vault and records it in the ledger in one statement: `from` is
   * debited (external:funding for the operator's funding, the parent vault for a budget
   * allocation). `movementId` is the ledger transaction's id.
   */
  async fundVault(
    trx: Knex.Transaction,
    vault: Pick<VaultRecord, "id" | "currency">,
    amountCents: number,
    movement: { id: string; kind: "vault.fund"; reference: string; at: Date },
  ): Promise<VaultRecord> {
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
   * Moves money between two vaults of one currency as one ledger transaction, in one statement;
   * both rows held FOR UPDATE. A movement whose id is already in the ledger moves nothing
   * (`moved` false): the id is the movement's idempotency key.
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

  /** A ledger transaction by id and what it moved on the vault's account (replays of a budget funding). */
  findTransfer(conn: Conn, id: string, account: { vaultId: string; currency: string }) {
    return transactionOnAccount(conn, id, vaultAccount(account.vaultId, account.currency));
  },
};

export type VaultsStore = typeof vaultsStore;
