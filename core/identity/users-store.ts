import type { Knex } from "knex";

export interface UserRecord {
  id: string;
  email: string;
  status: "active" | "inactive";
  createdAt: Date;
}

type Conn = Knex | Knex.Transaction;

/** A user as the operator sees it: with its root vault (null only if none was ever made). */
export interface UserListing extends UserRecord {
  vaultId: string | null;
}

const USER_LISTING = `SELECT u.id, u.email, u.status, u.created_at,
    (SELECT v.id FROM vaults v WHERE v.owner_user_id = u.id AND v.parent_vault_id IS NULL ORDER BY v.created_at LIMIT 1) AS vault_id
  FROM users u`;

function toListing(row: { id: string; email: string; status: UserRecord["status"]; created_at: string | Date; vault_id: string | null }): UserListing {
  return { id: row.id, email: row.email, status: row.status, createdAt: new Date(row.created_at), vaultId: row.vault_id ?? null };
}

/** SQL for users and their identity-provider links. */
export function createUsersStore() {
  return {
    /** Inserts the user unless the e-mail exists; answers the user's id either way, and whether it is new. */
    async ensureUser(trx: Knex.Transaction, u: { id: string; email: string; at: Date }): Promise<{ userId: string; created: boolean }> {
      const inserted = await trx.raw(
        `INSERT INTO users (id, email, status, created_at) VALUES (?, ?, 'active', ?) ON CONFLICT (email) DO NOTHING RETURNING id`,
        [u.id, u.email, u.at],
      );
      if ((inserted.rows as unknown[]).length > 0) return { userId: u.id, created: true };
      const { rows } = await trx.raw(`SELECT id FROM users WHERE email = ?`, [u.email]);
      return { userId: String((rows as { id: string }[])[0]!.id), created: false };
    },

    /** Up to `limit` users, oldest first, after the user with id `afterId` (a UUID the caller checked). */
    async list(conn: Conn, limit: number, afterId: string | undefined): Promise<UserListing[]> {
      const { rows } = afterId
        ? await conn.raw(`${USER_LISTING} WHERE (u.created_at, u.id) > (SELECT created_at, id FROM users WHERE id = ?) ORDER BY u.created_at, u.id LIMIT ?`, [
            afterId,
            limit,
          ])
        : await conn.raw(`${USER_LISTING} ORDER BY u.created_at, u.id LIMIT ?`, [limit]);
      return (rows as Parameters<typeof toListing>[0][]).map(toListing);
    },

    /** The user stored under the first of `spellings` (storedEmailSpellings, most exact first) that one is stored under. */
    async findByStoredEmail(conn: Conn, spellings: string[]): Promise<UserListing | undefined> {
      if (spellings.length === 0) return undefined;
      const { rows } = await conn.raw(`${USER_LISTING} WHERE u.email = ANY(?::text[])`, [spellings]);
      const found = (rows as Parameters<typeof toListing>[0][]).map(toListing);
      return spellings.map((s) => found.find((u) => u.email === s)).find(Boolean);
    },

    /**
     * Gives the user (locked by the caller) canonical `email`; answers the address it replaced, or
     * "taken" when another user holds it under any of `spellings` (the unique index decides races).
     */
    async setEmail(trx: Knex.Transaction, userId: string, email: string, spellings: string[]): Promise<{ previous: string } | "taken"> {
      const { rows } = await trx.raw(`SELECT email FROM users WHERE id = ?::uuid`, [userId]);
      const previous = String((rows as { email: string }[])[0]!.email);
      if (previous === email) return { previous };
      try {
        const updated = await trx.raw(
          `UPDATE users SET email = ? WHERE id = ?::uuid AND NOT EXISTS (SELECT 1 FROM users WHERE email = ANY(?::text[]) AND id <> ?::uuid) RETURNING id`,
          [email, userId, spellings, userId],
        );
        return (updated.rows as unknown[]).length > 0 ? { previous } : "taken";
      } catch (err) {
        if ((err as { code?: string }).code === "23505") return "taken";
        throw err;
      }
    },

    async findById(conn: Conn, id: string): Promise<UserRecord | undefined> {
      const row = await conn("users").where({ id }).first();
      return row ? { id: row.id, email: row.email, status: row.status, createdAt: new Date(row.created_at) } : undefined;
    },

    /** The user's row locked FOR UPDATE (its id a UUID the caller checked). */
    async lockUser(trx: Knex.Transaction, userId: string): Promise<{ id: string; status: UserRecord["status"] } | undefined> {
      const { rows } = await trx.raw(`SELECT id, status FROM users WHERE id = ?::uuid FOR UPDATE`, [userId]);
      return (rows as { id: string; status: UserRecord["status"] }[])[0];
    },

    /** The user's status, held FOR SHARE until the transaction ends: a deactivation waits for the caller or is seen by it. */
    async holdUserStatus(trx: Knex.Transaction, userId: string): Promise<UserRecord["status"] | undefined> {
      const { rows } = await trx.raw(`SELECT status FROM users WHERE id = ?::uuid FOR SHARE`, [userId]);
      return (rows as { status: UserRecord["status"] }[])[0]?.status;
    },

    /** The user's status and address, held FOR SHARE until the transaction ends: an operator's change waits for the caller or is seen by it. */
    async holdUser(trx: Knex.Transaction, userId: string): Promise<{ status: UserRecord["status"]; email: string } | undefined> {
      const { rows } = await trx.raw(`SELECT status, email FROM users WHERE id = ?::uuid FOR SHARE`, [userId]);
      return (rows as { status: UserRecord["status"]; email: string }[])[0];
    },

    /** Locks those of `userIds` that exist FOR KEY SHARE, in id order, until the transaction ends: lockUser waits for the caller. */
    async holdUsers(trx: Knex.Transaction, userIds: string[]): Promise<void> {
      await trx.raw(`SELECT 1 FROM users WHERE id = ANY(?::uuid[]) ORDER BY id FOR KEY SHARE`, [userIds]);
    },

    async setUserStatus(trx: Knex.Transaction, userId: string, status: UserRecord["status"]): Promise<void> {
      await trx.raw(`UPDATE users SET status = ? WHERE id = ?`, [status, userId]);
    },

    /** The user a provider's (issuer, subject) is linked to. */
    async findLinkedUser(conn: Conn, issuer: string, subject: string): Promise<string | undefined> {
      const row = await conn("identity_links").where({ issuer, subject }).first("user_id");
      return row ? String(row.user_id) : undefined;
    },

    /** Links (issuer, subject) to the user unless it is linked already; answers the user it is linked to now. */
    async link(trx: Knex.Transaction, l: { issuer: string; subject: string; userId: string; email: string | null; at: Date }): Promise<string | undefined> {
      await trx.raw(
        `INSERT INTO identity_links (issuer, subject, user_id, email, created_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (issuer, subject) DO NOTHING`,
        [l.issuer, l.subject, l.userId, l.email, l.at, l.at],
      );
      const row = await trx("identity_links").where({ issuer: l.issuer, subject: l.subject }).first("user_id");
      return row ? String(row.user_id) : undefined;
    },

    /** The subject the user is linked to at this issuer, if any (one per user and issuer). */
    async linkedSubject(conn: Conn, issuer: string, userId: string): Promise<string | undefined> {
      const row = await conn("identity_links").where({ issuer, user_id: userId }).first("subject");
      return row ? String(row.subject) : undefined;
    },

    async touchLink(conn: Conn, issuer: string, subject: string, at: Date): Promise<void> {
      await conn("identity_links").where({ issuer, subject }).update({ last_used_at: at });
    },
  };
}

export type UsersStore = ReturnType<typeof createUsersStore>;
