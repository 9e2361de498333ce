import type { Knex } from "knex";
import { pgArray } from "../db/sql.js";
import { accountId, type AccountRef } from "./accounts.js";

/** What a ledger transaction records: each is one movement of money. */
export type MovementKind =
  | "opening_balance"
  | "vault.fund"
  | "budget.fund"
  | "budget.sweep"
  | "payment"
  | "treasury.fund"
  | "treasury.bind"
  | "payout"
  | "transfer";

/** One leg: a signed amount on one account (credit positive, debit negative). */
export interface Leg {
  account: AccountRef;
  amountCents: number;
}

/**
 * One movement of money. `id` doubles as its idempotency key: appending a movement whose
 * id is already in the ledger adds nothing. Its legs sum to zero per currency.
 */
export interface Movement {
  id: string;
  kind: MovementKind;
  /** What moved the money, for people reading the ledger: a payment id, a batch id, ... */
  reference: string;
  at: Date;
  legs: Leg[];
}

/** An unbalanced or empty movement is a bug in its caller, never an input error. */
function checkBalanced(m: Movement): void {
  if (m.legs.length < 2) throw new Error(`ledger movement ${m.kind} needs at least two legs`);
  const totals = new Map<string, number>();
  for (const leg of m.legs) {
    if (!Number.isSafeInteger(leg.amountCents) || leg.amountCents === 0) throw new Error(`ledger movement ${m.kind} has a leg of ${leg.amountCents}`);
    totals.set(leg.account.currency, (totals.get(leg.account.currency) ?? 0) + leg.amountCents);
  }
  for (const [currency, total] of totals) if (total !== 0) throw new Error(`ledger movement ${m.kind} is unbalanced by ${total} ${currency}`);
}

/**
 * CTEs that append a movement in front of the state change it records (`WITH <sql> UPDATE ...`), so
 * the ledger costs no extra round trip; idempotent by movement id. Missing accounts are opened in id
 * order so two movements opening accounts cannot wait on each other in a cycle.
 */
export function movementCtes(m: Movement, prefix = "ledger"): { sql: string; bindings: Knex.RawBinding[] } {
  checkBalanced(m);
  const ids = m.legs.map((l) => accountId(l.account.kind, l.account.owner, l.account.currency));
  return {
    sql: `${prefix}_accounts AS (
            INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
            SELECT DISTINCT a.id, a.kind, a.owner, a.currency, ?::timestamptz
              FROM unnest(?::uuid[], ?::text[], ?::text[], ?::text[]) a (id, kind, owner, currency)
             ORDER BY a.id
            ON CONFLICT DO NOTHING
          ),
          ${prefix}_tx AS (
            INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (?, ?, ?, ?)
            ON CONFLICT (id) DO NOTHING RETURNING id
          ),
          ${prefix}_legs AS (
            INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
            SELECT t.id, l.account_id, l.amount, l.currency, ?::timestamptz
              FROM ${prefix}_tx t, unnest(?::uuid[], ?::bigint[], ?::text[]) WITH ORDINALITY l (account_id, amount, currency, n)
             ORDER BY l.n
            RETURNING transaction_id
          )`,
    bindings: [
      m.at,
      pgArray(ids),
      pgArray(m.legs.map((l) => l.account.kind)),
      pgArray(m.legs.map((l) => l.account.owner)),
      pgArray(m.legs.map((l) => l.account.currency)),
      m.id,
      m.kind,
      m.reference,
      m.at,
      m.at,
      pgArray(ids),
      pgArray(m.legs.map((l) => String(l.amountCents))),
      pgArray(m.legs.map((l) => l.account.currency)),
    ],
  };
}

/** One check of `ledger verify` that found something wrong, with the first case it found. */
export interface Discrepancy {
  check: "transaction_unbalanced" | "transaction_unknown" | "transaction_empty" | "account_unknown" | "balance_mismatch" | "in_flight_mismatch";
  message: string;
}

export interface VerifyReport {
  transactions: number;
  postings: number;
  accounts: number;
  discrepancies: Discrepancy[];
}

export function createLedgerStore(db: Knex) {
  return {
    /**
     * Proves the books from one consistent snapshot: balanced legs, known transactions and accounts,
     * balances equal to their postings. Names the first case of each failed check (docs/ledger.md).
     */
    async verify(): Promise<VerifyReport> {
      return db.transaction(async (trx) => {
        await trx.raw("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
        const first = async (sql: string): Promise<Record<string, unknown> | undefined> => ((await trx.raw(sql)).rows as Record<string, unknown>[])[0];
        const discrepancies: Discrepancy[] = [];
        const unbalanced = await first(
          `SELECT transaction_id, currency, sum(amount_cents)::text AS total FROM ledger_postings
            GROUP BY transaction_id, currency HAVING sum(amount_cents) <> 0 ORDER BY min(seq) LIMIT 1`,
        );
        if (unbalanced) {
          discrepancies.push({
            check: "transaction_unbalanced",
            message: `transaction ${unbalanced.transaction_id} does not balance: its ${unbalanced.currency} legs sum to ${unbalanced.total}`,
          });
        }
        const unknownTx = await first(
          `SELECT p.seq, p.transaction_id FROM ledger_postings p LEFT JOIN ledger_transactions t ON t.id = p.transaction_id
            WHERE t.id IS NULL ORDER BY p.seq LIMIT 1`,
        );
        if (unknownTx)
          discrepancies.push({
            check: "transaction_unknown",
            message: `posting ${unknownTx.seq} names transaction ${unknownTx.transaction_id}, which is not in the ledger`,
          });
        const empty = await first(
          `SELECT t.id FROM ledger_transactions t WHERE NOT EXISTS (SELECT 1 FROM ledger_postings p WHERE p.transaction_id = t.id)
            ORDER BY t.created_at, t.id LIMIT 1`,
        );
        if (empty) discrepancies.push({ check: "transaction_empty", message: `transaction ${empty.id} has no postings` });
        const unknownAccount = await first(
          `SELECT p.seq, p.account_id, p.currency, a.currency AS account_currency
             FROM ledger_postings p LEFT JOIN ledger_accounts a ON a.id = p.account_id
            WHERE a.id IS NULL OR a.currency <> p.currency ORDER BY p.seq LIMIT 1`,
        );
        if (unknownAccount) {
          discrepancies.push({
            check: "account_unknown",
            message: unknownAccount.account_currency
              ? `posting ${unknownAccount.seq} is in ${unknownAccount.currency} on account ${unknownAccount.account_id}, which holds ${unknownAccount.account_currency}`
              : `posting ${unknownAccount.seq} names account ${unknownAccount.account_id}, which does not exist`,
          });
        }
        const mismatch = await first(BALANCE_MISMATCH_SQL);
        if (mismatch) {
          discrepancies.push({
            check: "balance_mismatch",
            message: `${mismatch.kind} ${mismatch.owner} holds ${mismatch.expected} ${mismatch.currency} but its postings sum to ${mismatch.posted}`,
          });
        }
        const inFlight = await first(IN_FLIGHT_MISMATCH_SQL);
        if (inFlight) {
          discrepancies.push({
            check: "in_flight_mismatch",
            message: `payments on their way to a chain total ${inFlight.expected} ${inFlight.currency} but the in-flight account's postings sum to ${inFlight.posted}`,
          });
        }
        const counts = await first(
          `SELECT (SELECT count(*) FROM ledger_transactions)::bigint AS transactions, (SELECT count(*) FROM ledger_postings)::bigint AS postings,
                  (SELECT count(*) FROM ledger_accounts)::bigint AS accounts`,
        );
        return { transactions: Number(counts!.transactions), postings: Number(counts!.postings), accounts: Number(counts!.accounts), discrepancies };
      });
    },
  };
}

export type LedgerStore = ReturnType<typeof createLedgerStore>;

/**
 * Every balance against its postings; an account of a vault or treasury that is gone, or in a
 * currency it no longer holds, must sum to zero. Users' balances are their settled transfers.
 */
const BALANCE_MISMATCH_SQL = `
  WITH sums AS (SELECT account_id, sum(amount_cents) AS total FROM ledger_postings GROUP BY account_id),
  entries AS (
    SELECT ledger_account_id('user', user_id::text, currency) AS id, user_id::text AS owner, currency, sum(cents) AS expected
      FROM (SELECT user_id, currency, CASE direction WHEN 'credit' THEN amount_cents ELSE -amount_cents END AS cents
              FROM ledger_entries WHERE status = 'settled'
            UNION ALL
            SELECT recipient_user_id, currency, amount_cents FROM treasury_executions WHERE seq IS NOT NULL) t
     GROUP BY user_id, currency
  ),
  user_postings AS (SELECT a.id, a.owner, a.currency, s.total FROM ledger_accounts a JOIN sums s ON s.account_id = a.id WHERE a.kind = 'user')
  SELECT * FROM (
    SELECT 'vault' AS kind, v.id::text AS owner, v.currency, v.balance_cents::text AS expected, coalesce(s.total, 0)::text AS posted
      FROM vaults v LEFT JOIN sums s ON s.account_id = ledger_account_id('vault', v.id::text, v.currency)
     WHERE v.balance_cents <> coalesce(s.total, 0)
    UNION ALL
    SELECT 'treasury', t.partner_id::text, t.currency, t.balance_cents::text, coalesce(s.total, 0)::text
      FROM treasuries t LEFT JOIN sums s ON s.account_id = ledger_account_id('treasury', t.partner_id::text, t.currency)
     WHERE t.balance_cents <> coalesce(s.total, 0)
    UNION ALL
    SELECT a.kind, a.owner, a.currency, '0', s.total::text
      FROM ledger_accounts a JOIN sums s ON s.account_id = a.id
     WHERE s.total <> 0 AND (
       (a.kind = 'vault' AND NOT EXISTS (SELECT 1 FROM vaults v WHERE v.id::text = a.owner AND v.currency = a.currency))
       OR (a.kind = 'treasury' AND NOT EXISTS (SELECT 1 FROM treasuries t WHERE t.partner_id::text = a.owner AND t.currency = a.currency)))
    UNION ALL
    SELECT 'user', coalesce(e.owner, u.owner), coalesce(e.currency, u.currency), coalesce(e.expected, 0)::text, coalesce(u.total, 0)::text
      FROM entries e FULL JOIN user_postings u ON u.id = e.id
     WHERE coalesce(e.expected, 0) <> coalesce(u.total, 0)
  ) m ORDER BY kind, owner LIMIT 1`;

/** The in-flight account against the payments it holds: accepted on the evm rail, neither settled nor failed. */
const IN_FLIGHT_MISMATCH_SQL = `
  WITH posted AS (
    SELECT a.currency, coalesce(sum(p.amount_cents), 0) AS total
      FROM ledger_accounts a LEFT JOIN ledger_postings p ON p.account_id = a.id
     WHERE a.kind = 'external' AND a.owner = 'in_flight' GROUP BY a.currency
  ),
  open AS (
    SELECT currency, sum(amount_cents) AS total FROM settlement_payments
     WHERE rail = 'evm' AND status IN ('pending', 'submitted') GROUP BY currency
  )
  SELECT coalesce(posted.currency, open.currency) AS currency, coalesce(open.total, 0)::text AS expected, coalesce(posted.total, 0)::text AS posted
    FROM posted FULL JOIN open ON open.currency = posted.currency
   WHERE coalesce(open.total, 0) <> coalesce(posted.total, 0)
   ORDER BY 1 LIMIT 1`;
