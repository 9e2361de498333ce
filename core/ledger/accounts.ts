import { createHash } from "node:crypto";

/**
 * Ledger accounts. Every account is named by its kind, its owner and its currency, and
 * its id is a pure function of the three (the SQL function ledger_account_id computes the
 * same), so a movement names its accounts without reading them first.
 *
 * - vault:<vault id>: what a vault holds (its balance_cents).
 * - treasury:<partner id>: what a partner's treasury holds (its balance_cents).
 * - user:<user id>: a user's transfer account; its balance is the sum of their settled
 *   transfers (credits minus debits): their transfer entries and the payouts they received.
 * - external:<name>: money entering or leaving the books: `funding` (operator funding of
 *   vaults and treasuries), `payments` (agent payments paid out to counterparties),
 *   `transfers` (users' transfers recorded from outside), `opening` (balances carried in
 *   when the ledger started).
 */
export type AccountKind = "vault" | "treasury" | "user" | "external";
export type ExternalAccount = "funding" | "payments" | "transfers" | "opening";

export interface AccountRef {
  kind: AccountKind;
  owner: string;
  currency: string;
}

/** The id of an account (the same as SQL `ledger_account_id(kind, owner, currency)`). */
export function accountId(kind: AccountKind, owner: string, currency: string): string {
  const h = createHash("md5").update(`${kind}:${owner}:${currency}`).digest("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export const vaultAccount = (vaultId: string, currency: string): AccountRef => ({ kind: "vault", owner: vaultId.toLowerCase(), currency });
export const treasuryAccount = (partnerId: string, currency: string): AccountRef => ({ kind: "treasury", owner: partnerId.toLowerCase(), currency });
export const userAccount = (userId: string, currency: string): AccountRef => ({ kind: "user", owner: userId.toLowerCase(), currency });
export const externalAccount = (name: ExternalAccount, currency: string): AccountRef => ({ kind: "external", owner: name, currency });
