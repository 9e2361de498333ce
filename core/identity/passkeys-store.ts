import type { Knex } from "knex";
import { textArray } from "../db/rows.js";

type Conn = Knex | Knex.Transaction;

export type DeviceType = "singleDevice" | "multiDevice";

/** A stored passkey of a relying party (`removed_at` unset). */
export interface StoredPasskey {
  id: string;
  credentialId: string;
  userId: string;
  publicKey: Uint8Array<ArrayBuffer>;
  counter: number;
  transports: string[];
  deviceType: DeviceType;
  backedUp: boolean;
  name: string;
  createdAt: Date;
  lastUsedAt: Date | null;
}

/** SQL for passkeys: registered per relying party, removed softly, counters only moving forward. */
export function createPasskeysStore() {
  return {
    /** The user's passkeys for this relying party, oldest first. */
    async listActive(conn: Conn, userId: string, rpId: string): Promise<StoredPasskey[]> {
      const rows = await conn("passkeys").where({ user_id: userId, rp_id: rpId }).whereNull("removed_at").orderBy("created_at");
      return rows.map(toStored);
    },

    async findActive(conn: Conn, credentialId: string, rpId: string): Promise<StoredPasskey | undefined> {
      const row = await conn("passkeys").where({ credential_id: credentialId, rp_id: rpId }).whereNull("removed_at").first();
      return row ? toStored(row) : undefined;
    },

    /** Stores a new passkey; false when its credential id is already registered. */
    async insert(conn: Conn, k: Omit<StoredPasskey, "lastUsedAt" | "publicKey"> & { publicKey: Uint8Array; rpId: string; aaguid: string }): Promise<boolean> {
      const { rows } = await conn.raw(
        `INSERT INTO passkeys (id, credential_id, user_id, rp_id, public_key, counter, transports, device_type, backed_up, aaguid, name, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (credential_id) DO NOTHING RETURNING id`,
        [k.id, k.credentialId, k.userId, k.rpId, Buffer.from(k.publicKey), k.counter, k.transports, k.deviceType, k.backedUp, k.aaguid, k.name, k.createdAt],
      );
      return (rows as unknown[]).length > 0;
    },

    /**
     * Records a use if the counter moved forward (both 0: an authenticator without a counter).
     * The update is conditional, so two uses of one counter value cannot both pass.
     */
    async recordUse(conn: Conn, id: string, use: { counter: number; backedUp: boolean; deviceType: DeviceType; at: Date }): Promise<boolean> {
      const { rows } = await conn.raw(
        `UPDATE passkeys SET counter = ?, backed_up = ?, device_type = ?, last_used_at = ?
          WHERE id = ? AND removed_at IS NULL AND (counter < ? OR (counter = 0 AND ? = 0)) RETURNING id`,
        [use.counter, use.backedUp, use.deviceType, use.at, id, use.counter, use.counter],
      );
      return (rows as unknown[]).length > 0;
    },

    /** Removes one of the user's passkeys and answers its name; undefined when the user has no such passkey. */
    async remove(conn: Conn, userId: string, id: string, at: Date): Promise<string | undefined> {
      const rows = (await conn("passkeys").where({ id, user_id: userId }).whereNull("removed_at").update({ removed_at: at }).returning(["name"])) as {
        name: string;
      }[];
      return rows[0] ? String(rows[0].name) : undefined;
    },
  };
}

export type PasskeysStore = ReturnType<typeof createPasskeysStore>;

function toStored(row: Record<string, unknown>): StoredPasskey {
  return {
    id: String(row.id),
    credentialId: String(row.credential_id),
    userId: String(row.user_id),
    publicKey: new Uint8Array(row.public_key as Buffer),
    counter: Number(row.counter),
    transports: textArray(row.transports),
    deviceType: row.device_type as DeviceType,
    backedUp: Boolean(row.backed_up),
    name: String(row.name),
    createdAt: new Date(row.created_at as string),
    lastUsedAt: row.last_used_at ? new Date(row.last_used_at as string) : null,
  };
}
