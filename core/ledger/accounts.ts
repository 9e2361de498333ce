import { md5Uuid } from "../../lib/crypto.js";

/**
 * An account's id is a pure function of kind, owner and currency (as SQL ledger_account_id), so a
 * movement names its accounts without reading them. The kinds are described in docs/ledger.md.
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
  return md5Uuid(`${kind}:${owner}:${currency}`);
}

export const vaultAccount = (vaultId: string, currency: string): AccountRef => ({ kind: "vault", owner: vaultId.toLowerCase(), currency });
export const treasuryAccount = (partnerId: string, currency: string): AccountRef => ({ kind: "treasury", owner: partnerId.toLowerCase(), currency });
export const userAccount = (userId: string, currency: string): AccountRef => ({ kind: "user", owner: userId.toLowerCase(), currency });
export const externalAccount = (name: ExternalAccount, currency: string): AccountRef => ({ kind: "external", owner: name, currency });
