import { externalAccount, treasuryAccount, type ExternalAccount } from "../ledger/accounts.js";
import type { Leg } from "../ledger/store.js";

/**
 * How treasury money shows in the double-entry ledger (core/ledger/store.ts).
 *
 * - `treasury fund`: external:funding -> treasury:<partner> ("treasury.fund").
 * - `treasury bind` sets the balance: the difference to the balance held before is one
 *   "treasury.bind" movement against external:funding. A rebind into another currency
 *   moves the whole old balance out (old currency) and the new one in (new currency), so
 *   the account of a currency the treasury no longer holds sums to zero.
 */

/** Where operator money enters and leaves a treasury. */
const FUNDING: ExternalAccount = "funding";

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
