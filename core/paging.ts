import { createHmac, randomBytes } from "node:crypto";
import type { Db } from "./db/knex.js";
import { constantTimeEqual } from "./partners/credentials.js";

/** Server-signed opaque cursors: tampering or a cursor from another server fails to decode. */
export interface CursorCodec {
  encode(position: Record<string, string | number>): string;
  /** undefined when malformed or not signed by this deployment. */
  decode(cursor: string): Record<string, string | number> | undefined;
}

export function createCursorCodec(key: Buffer): CursorCodec {
  const mac = (body: string) => createHmac("sha256", key).update(body).digest("base64url").slice(0, 22);
  return {
    encode(position) {
      const body = Buffer.from(JSON.stringify(position)).toString("base64url");
      return `${body}.${mac(body)}`;
    },
    decode(cursor) {
      const [body, sig, ...rest] = cursor.split(".");
      if (!body || !sig || rest.length > 0 || !constantTimeEqual(sig, mac(body))) return undefined;
      try {
        const value: unknown = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
        return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, string | number>) : undefined;
      } catch {
        return undefined;
      }
    },
  };
}

/** A random per-deployment secret kept in the database, so every replica shares it. */
export async function loadInstanceSecret(db: Db, name: string): Promise<Buffer> {
  await db.raw(`INSERT INTO instance_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, [name, randomBytes(32)]);
  const { rows } = await db.raw(`SELECT value FROM instance_secrets WHERE name = ?`, [name]);
  const value = (rows as { value: Uint8Array }[])[0]!.value;
  return Buffer.from(value);
}
