import type { Knex } from "knex";
import type { Db } from "./knex.js";

/**
 * Stores `value` under `name` in instance_secrets unless a value is stored already, and returns
 * the stored one: the first writer wins and concurrent starts of every replica agree.
 */
export async function firstWrittenValue(db: Db, name: string, value: Buffer): Promise<Buffer> {
  await db.raw(`INSERT INTO instance_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`, [name, value]);
  const { rows } = await db.raw(`SELECT value FROM instance_secrets WHERE name = ?`, [name]);
  return Buffer.from((rows as { value: Uint8Array }[])[0]!.value);
}

/** The value stored under `name`, locked until the transaction ends; undefined when none is. */
export async function lockedValue(trx: Knex.Transaction, name: string): Promise<Buffer | undefined> {
  const { rows } = await trx.raw(`SELECT value FROM instance_secrets WHERE name = ? FOR UPDATE`, [name]);
  const row = (rows as { value: Uint8Array }[])[0];
  return row ? Buffer.from(row.value) : undefined;
}

export async function deleteValue(trx: Knex.Transaction, name: string): Promise<void> {
  await trx("instance_secrets").where({ name }).delete();
}
