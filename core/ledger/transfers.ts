import type { Knex } from "knex";
import { FEED_AFTER_SQL, FEED_COLUMNS_SQL, readSettled, toFeedRead, type FeedPosition } from "../paging.js";
import { externalAccount, userAccount } from "./accounts.js";
import { movementCtes } from "./store.js";
import { PAYOUT_TRANSFER_ID_SQL } from "./treasury.js";

type Conn = Knex | Knex.Transaction;

/** A user's transfer: an entry of ledger_entries, or a payout the user received, read as one. */
export interface LedgerEntry {
  seq: number;
  id: string;
  userId: string;
  direction: "credit" | "debit";
  amountCents: number;
  currency: string;
  status: "pending" | "settled" | "failed";
  createdAt: Date;
  updatedAt: Date;
}

/**
 * The next position in the transfers feed, for a payout row (treasury_executions.seq): entries and
 * payouts take seq from one sequence, so a position names one row of either.
 */
export const NEXT_TRANSFER_SEQ_SQL = "nextval('ledger_entries_seq_seq')";

/**
 * Appends a ledger entry. The row records its transaction's id (migration 0014) and the
 * transfers feed reads up to the commit horizon (core/paging.ts), so a late-committing
 * entry still reaches every reader exactly once; writers take no feed lock.
 */
export async function insertTransferEntry(trx: Knex.Transaction, e: Omit<LedgerEntry, "seq">): Promise<LedgerEntry> {
  // A settled entry moves money: one ledger transaction (its id is the entry's) between
  // the user's transfer account and external:transfers, in the same statement.
  const moves = e.status === "settled" && e.amountCents > 0;
  const sign = e.direction === "credit" ? 1 : -1;
  const ledger = moves
    ? movementCtes({
        id: e.id,
        kind: "transfer",
        reference: `transfer:${e.id}`,
        at: e.createdAt,
        legs: [
          { account: userAccount(e.userId, e.currency), amountCents: sign * e.amountCents },
          { account: externalAccount("transfers", e.currency), amountCents: -sign * e.amountCents },
        ],
      })
    : undefined;
  const { rows } = await trx.raw(
    `${ledger ? `WITH ${ledger.sql} ` : ""}INSERT INTO ledger_entries (id, user_id, direction, amount_cents, currency, status, created_at, updated_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING *`,
    [...(ledger?.bindings ?? []), e.id, e.userId, e.direction, e.amountCents, e.currency, e.status, e.createdAt, e.updatedAt],
  );
  return toLedger((rows as Record<string, unknown>[])[0]!);
}

/**
 * The user's transfers after `after` in feed order: their entries and the payouts they
 * received. Both take seq from one sequence, so a position names one row of either.
 */
export async function listTransfers(conn: Conn, userId: string, after: FeedPosition, limit: number): Promise<{ row: LedgerEntry; position: FeedPosition }[]> {
  return readSettled(async () => {
    const { rows } = await conn.raw(
      `SELECT *, ${FEED_COLUMNS_SQL} FROM (
         (SELECT seq, id, user_id, direction, amount_cents, currency, status, created_at, updated_at, xid
            FROM ledger_entries WHERE user_id = ? AND ${FEED_AFTER_SQL} ORDER BY xid, seq LIMIT ?)
         UNION ALL
         (SELECT seq, ${PAYOUT_TRANSFER_ID_SQL}, recipient_user_id, 'credit', amount_cents, currency, 'settled',
                 executed_at, executed_at, xid
            FROM treasury_executions WHERE recipient_user_id = ? AND seq IS NOT NULL AND ${FEED_AFTER_SQL} ORDER BY xid, seq LIMIT ?)
       ) t ORDER BY xid, seq LIMIT ?`,
      [userId, after.xid, after.seq, limit, userId, after.xid, after.seq, limit, limit],
    );
    return (rows as Record<string, unknown>[]).map((r) => toFeedRead(r, toLedger(r)));
  });
}

function toLedger(r: Record<string, unknown>): LedgerEntry {
  return {
    seq: Number(r.seq),
    id: String(r.id),
    userId: String(r.user_id),
    direction: r.direction as LedgerEntry["direction"],
    amountCents: Number(r.amount_cents),
    currency: String(r.currency),
    status: r.status as LedgerEntry["status"],
    createdAt: r.created_at instanceof Date ? r.created_at : new Date(String(r.created_at)),
    updatedAt: r.updated_at instanceof Date ? r.updated_at : new Date(String(r.updated_at)),
  };
}
