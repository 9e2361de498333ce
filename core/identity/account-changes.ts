import type { Knex } from "knex";
import { canonicalEmail } from "../../lib/email.js";
import type { Mailer } from "./mail/mailer.js";
import type { SignInStore } from "./signin-store.js";

/** What ending a user's sign-ins needs. */
export interface EndSignInsDeps {
  signIn: Pick<SignInStore, "retireUserCodes" | "endUserSessions">;
  mail: Pick<Mailer, "withdrawCodes">;
}

/**
 * Everything that still acts for the user as they were: unused codes stop working, their unsent
 * mails are dropped (notices still go) and every web session ends. Run holding the user row
 * (lockUser) in the transaction that changes the account; answers how many sessions ended.
 */
export async function endSignIns(deps: EndSignInsDeps, trx: Knex.Transaction, user: { id: string; email: string }, at: Date): Promise<number> {
  await deps.signIn.retireUserCodes(trx, user.id, at);
  // Codes go to the address's one spelling; a row stored before it may spell it otherwise.
  await deps.mail.withdrawCodes(trx, [...new Set([user.email, canonicalEmail(user.email) ?? user.email])]);
  return deps.signIn.endUserSessions(trx, user.id, at);
}
