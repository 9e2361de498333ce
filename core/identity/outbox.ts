import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import type { ListOutboxRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import { deriveKey } from "../keys/outside-keys.js";
import { createSecretBox } from "../../lib/crypto.js";
import { normaliseEmail } from "./users-store.js";
import type { OutboxStore } from "./outbox-store.js";
import type { Mailer } from "./mail/mailer.js";

/** Marks a dev outbox text sealed under the outside key (older rows were plain). */
const SEALED = "sealed:";

export interface OutboxMessage {
  email: string;
  subject: string;
  body: string;
  at: Date;
}

/**
 * The dev outbox: messages are stored sealed under a key derived from the outside key,
 * so the database alone never shows a one-time code.
 */
export function createOutbox(deps: { store: OutboxStore; signinCodeKey: Buffer; mailer?: Mailer }) {
  // With SMTP configured, account mail goes to the mail outbox and its sender instead.
  const smtp = deps.mailer?.mode === "smtp" ? deps.mailer : undefined;
  const box = createSecretBox(deriveKey(deps.signinCodeKey, "dev outbox"));
  const unseal = (text: string) => {
    if (!text.startsWith(SEALED)) return text;
    try {
      return box.open(text.slice(SEALED.length));
    } catch {
      return "(sealed under another key)";
    }
  };
  return {
    mode: smtp ? ("smtp" as const) : ("dev" as const),
    send(conn: Knex | Knex.Transaction, m: OutboxMessage) {
      if (smtp) return smtp.queue(conn, { to: m.email, subject: m.subject, body: m.body, at: m.at });
      return deps.store.insertOutbox(conn, {
        id: randomUUID(),
        email: m.email,
        subject: SEALED + box.seal(m.subject),
        body: SEALED + box.seal(m.body),
        at: m.at,
      });
    },
    /** The newest messages, opened (to one address when given). */
    async list(conn: Knex | Knex.Transaction, email: string | undefined) {
      const rows = await deps.store.listOutbox(conn, email);
      return rows.map((m) => ({ ...m, subject: unseal(m.subject), body: unseal(m.body) }));
    },
  };
}

export type Outbox = ReturnType<typeof createOutbox>;

/** GrantsService.ListOutbox: the dev outbox, newest first (`vaultgate dev outbox`). */
export async function listOutbox(deps: { db: Db; outbox: Outbox }, req: ListOutboxRequest) {
  const email = req.email ? (normaliseEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "email must be an e-mail address")) : undefined;
  const rows = await deps.outbox.list(deps.db, email);
  return { messages: rows.map((m) => ({ email: m.email, subject: m.subject, body: m.body, createdAt: m.createdAt.toISOString() })) };
}
