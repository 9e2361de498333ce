import type { Knex } from "knex";
import { derivedUuid } from "../../lib/crypto.js";
import { externalAccount, treasuryAccount, type ExternalAccount } from "./accounts.js";
import type { Leg } from "./store.js";

/**
 * How treasury money shows in the double-entry ledger (the movements are tabled in docs/ledger.md):
 * fund, bind (the balance difference; a currency change empties the old currency's account) and
 * batch payouts, each executed item being its recipient's settled credit transfer.
 */

/** Where operator money enters and leaves a treasury. */
const FUNDING: ExternalAccount = "funding";

/**
 * A payout's transfer id (a version 8 UUID), derived from an execution id used once per partner
 * and stored with the execution, so each payout has exactly one transfer whose id never changes.
 */
export function payoutTransferId(partnerId: string, executionId: string): string {
  return derivedUuid("payout", partnerId.toLowerCase(), executionId);
}

/** A treasury_executions row's transfer id: payouts stored without one keep the md5 id they were given. */
export const PAYOUT_TRANSFER_ID_SQL = `coalesce(transfer_id, md5('payout:' || partner_id::text || ':' || execution_id)::uuid)`;

/** Legs of a fund: external:funding pays into the treasury. */
export function fundLegs(partnerId: string, currency: string, amountCents: number): Leg[] {
  return [
    { account: externalAccount(FUNDING, currency), amountCents: -amountCents },
    { account: treasuryAccount(partnerId, currency), amountCents },
  ];
}

/**
 * Legs that take a treasury from what it held before a bind (a first bind starts from an
 * empty treasury in the new currency) to what the bind sets; empty when nothing changes.
 */
export function bindLegs(partnerId: string, before: { currency: string; balanceCents: number }, after: { currency: string; balanceCents: number }): Leg[] {
  const legs: Leg[] = [];
  const move = (currency: string, cents: number) => {
    if (cents === 0) return;
    legs.push({ account: treasuryAccount(partnerId, currency), amountCents: cents }, { account: externalAccount(FUNDING, currency), amountCents: -cents });
  };
  if (before.currency === after.currency) {
    move(after.currency, after.balanceCents - before.balanceCents);
  } else {
    move(before.currency, -before.balanceCents);
    move(after.currency, after.balanceCents);
  }
  return legs;
}

/**
 * CTEs that book a batch's payout as one payout movement (`WITH <sql>, ... <statement>`): the
 * treasury pays each recipient's user account, whose missing accounts open in id order. `items`
 * names the caller's relation of paid items (n, user_id, amount_cents), n giving the legs' order.
 */
export function payoutMovementCtes(
  items: string,
  m: { id: string; reference: string; at: Date },
  treasury: { partnerId: string; currency: string },
): { sql: string; bindings: Knex.RawBinding[] } {
  return {
    sql: `recipients AS MATERIALIZED (
            SELECT r.user_id, ledger_account_id('user', r.user_id::text, ?::text) AS account_id FROM (SELECT DISTINCT user_id FROM ${items}) r
          ),
          payout_accounts AS (
            INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
            SELECT account_id, 'user', user_id::text, ?, ?::timestamptz FROM recipients ORDER BY account_id
            ON CONFLICT DO NOTHING
          ),
          payout_tx AS (
            INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (?, 'payout', ?, ?::timestamptz)
          ),
          payout_legs AS (
            INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
            SELECT ?::uuid, l.account_id, l.amount_cents, ?, ?::timestamptz
              FROM (SELECT 0::bigint AS n, ledger_account_id('treasury', ?::text, ?::text) AS account_id, (-sum(amount_cents))::bigint AS amount_cents FROM ${items}
                    UNION ALL
                    SELECT min(i.n), r.account_id, sum(i.amount_cents)::bigint FROM ${items} i JOIN recipients r ON r.user_id = i.user_id
                     GROUP BY r.account_id) l
             ORDER BY l.n
          )`,
    bindings: [
      treasury.currency,
      // payout_accounts
      treasury.currency,
      m.at,
      // payout_tx
      m.id,
      m.reference,
      m.at,
      // payout_legs
      m.id,
      treasury.currency,
      m.at,
      treasury.partnerId,
      treasury.currency,
    ],
  };
}
