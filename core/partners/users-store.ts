import type { Knex } from "knex";

export interface UserRecord {
  id: string;
  email: string;
  status: "active" | "inactive";
  createdAt: Date;
}

type Conn = Knex | Knex.Transaction;

/** Normalises an e-mail for identity: trimmed and lower-cased; undefined when not an address. */
export function normaliseEmail(value: string): string | undefined {
  const email = value.trim().toLowerCase();
  if (email.length > 254 || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) return undefined;
  return email;
}

/** SQL for users and their root vaults. */
export function createUsersStore() {
  return {
    /** Inserts the user and a root vault unless the e-mail exists; returns the ids either way. */
    async ensureUser(trx: Knex.Transaction, u: { id: string; email: string; vaultId: string; at: Date }) {
      const inserted = await trx.raw(
        `INSERT INTO users (id, email, status, created_at) VALUES (?, ?, 'active', ?) ON CONFLICT (email) DO NOTHING RETURNING id`,
        [u.id, u.email, u.at],
      );
      if ((inserted.rows as unknown[]).length > 0) {
        await trx.raw(`INSERT INTO vaults (id, owner_user_id, created_at) VALUES (?, ?, ?)`, [u.vaultId, u.id, u.at]);
        return { userId: u.id, vaultId: u.vaultId, created: true };
      }
      const { rows } = await trx.raw(
        `SELECT u.id AS user_id, v.id AS vault_id FROM users u
           JOIN vaults v ON v.owner_user_id = u.id AND v.parent_vault_id IS NULL
          WHERE u.email = ? ORDER BY v.created_at LIMIT 1`,
        [u.email],
      );
      const row = (rows as { user_id: string; vault_id: string }[])[0]!;
      return { userId: row.user_id, vaultId: row.vault_id, created: false };
    },

    async findById(conn: Conn, id: string): Promise<UserRecord | undefined> {
      const row = await conn("users").where({ id }).first();
      return row ? { id: row.id, email: row.email, status: row.status, createdAt: new Date(row.created_at) } : undefined;
    },
  };
}

export type UsersStore = ReturnType<typeof createUsersStore>;
