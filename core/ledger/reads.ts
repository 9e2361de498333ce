import type { Knex } from "knex";
import { accountId, type AccountRef } from "./accounts.js";

type Conn = Knex | Knex.Transaction;

/**
 * A ledger transaction by id, with what it moved on one account (the sum of its legs there),
 * found through the account's index: a replay check reads one account's postings, never the ledger.
 */
export async function transactionOnAccount(conn: Conn, id: string, account: AccountRef): Promise<{ kind: string; amountCents: number } | undefined> {
  const { rows } = await conn.raw(
    `SELECT t.kind, (SELECT coalesce(sum(p.amount_cents), 0) FROM ledger_postings p WHERE p.account_id = ? AND p.transaction_id = t.id)::text AS amount
       FROM ledger_transactions t WHERE t.id = ?`,
    [accountId(account.kind, account.owner, account.currency), id],
  );
  const r = (rows as Record<string, unknown>[])[0];
  return r ? { kind: String(r.kind), amountCents: Number(r.amount) } : undefined;
}

/** Whether a ledger transaction with this id is in the books (a movement id doubles as its idempotency key). */
export async function transactionExists(conn: Conn, id: string): Promise<boolean> {
  const { rows } = await conn.raw(`SELECT 1 FROM ledger_transactions WHERE id = ?`, [id]);
  return (rows as unknown[]).length > 0;
}

/** The sum of every posting on one account, in cents (a bigint as text can exceed a double's exact range). */
export async function accountTotalCents(conn: Conn, account: AccountRef): Promise<bigint> {
  const { rows } = await conn.raw(`SELECT coalesce(sum(amount_cents), 0)::text AS total FROM ledger_postings WHERE account_id = ?`, [
    accountId(account.kind, account.owner, account.currency),
  ]);
  return BigInt((rows as { total: string }[])[0]!.total);
}
