import { md5Uuid } from "../../lib/crypto.js";
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
 * A payout's transfer id, derived (as in SQL, md5 of `payout:<partner>:<execution>` as a uuid) from
 * an execution id used once per partner, so each payout has exactly one transfer whose id never changes.
 */
export function payoutTransferId(partnerId: string, executionId: string): string {
  return md5Uuid(`payout:${partnerId.toLowerCase()}:${executionId}`);
}

/** SQL twin of payoutTransferId, over a partner id and an execution id expression. */
export const PAYOUT_TRANSFER_ID_SQL = (partnerIdSql: string, executionIdSql: string) => `md5('payout:' || ${partnerIdSql} || ':' || ${executionIdSql})::uuid`;

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
