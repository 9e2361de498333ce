import type { Knex } from "knex";
import { canonicalEmail } from "../../lib/email.js";
import type { ListOutboxRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import type { Mailer } from "./mail/mailer.js";
import { createDevOutboxStore, mailBoxes } from "./mail/outbox.js";

export interface OutboxMessage {
  email: string;
  subject: string;
  body: string;
  at: Date;
  /** A message carrying a one-time code: the code's expiry (the message is not sent after it). */
  expiresAt?: Date;
}

/**
 * Account mail, queued in the caller's transaction through the mailer (SMTP or the dev outbox,
 * both sealed under a key outside the database); the dev outbox can be read back.
 */
export function createOutbox(deps: { mailer: Mailer; signinCodeKey: Buffer }) {
  const dev = createDevOutboxStore(mailBoxes(deps.signinCodeKey).dev);
  return {
    mode: deps.mailer.mode,
    /** Queues `m`; `deliver` false does the same work and writes nothing (see Mailer.queue). */
    send: (conn: Knex | Knex.Transaction, m: OutboxMessage, deliver = true) =>
      deps.mailer.queue(conn, { to: m.email, subject: m.subject, body: m.body, at: m.at, expiresAt: m.expiresAt }, deliver),
    /** The newest dev outbox messages, opened (to one address when given). */
    list: (conn: Knex | Knex.Transaction, email: string | undefined) => dev.list(conn, email),
  };
}

export type Outbox = ReturnType<typeof createOutbox>;

/** GrantsService.ListOutbox: the dev outbox, newest first (`vaultgate dev outbox`). */
export async function listOutbox(deps: { db: Db; outbox: Outbox }, req: ListOutboxRequest) {
  const email = req.email ? (canonicalEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "email must be an e-mail address")) : undefined;
  const rows = await deps.outbox.list(deps.db, email);
  return { messages: rows.map((m) => ({ email: m.email, subject: m.subject, body: m.body, createdAt: m.createdAt.toISOString() })) };
}
