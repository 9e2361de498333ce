import type { Knex } from "knex";
import type { Db } from "../../db/knex.js";
import { createDevOutboxStore, createMailOutboxStore, mailBoxes, type MailMessage, type MailOutboxStore } from "./outbox.js";
import type { SmtpSettings } from "./transport.js";

export interface Mailer {
  /** "smtp" sends for real; "dev" keeps messages in the dev outbox, which nobody receives. */
  readonly mode: "smtp" | "dev";
  /**
   * Queues a message in the caller's transaction: it is sent only if that commits. With `deliver`
   * false it does the same work and writes nothing, so a caller's timing need not show which it was.
   */
  queue(conn: Knex | Knex.Transaction, m: MailMessage, deliver?: boolean): Promise<string>;
  /** Drops the unsent code messages to these addresses in the caller's transaction (the dev outbox sends nothing and keeps its rows). */
  withdrawCodes(conn: Knex | Knex.Transaction, to: string[]): Promise<number>;
  /** The SMTP outbox (undefined in dev mode), for the sender worker. */
  readonly outbox: MailOutboxStore | undefined;
  /** One line for the startup log saying where mail goes. */
  describe(): string;
}

/**
 * Where account mail goes: the SMTP outbox when SMTP_URL and MAIL_FROM are set, else the
 * development outbox. Both seal subject and body under the sign-in code key.
 */
export function createMailer(deps: { db: Db; signinCodeKey: Buffer; smtp?: SmtpSettings }): Mailer {
  const boxes = mailBoxes(deps.signinCodeKey);
  if (deps.smtp) {
    const outbox = createMailOutboxStore(deps.db, boxes.smtp);
    const host = new URL(deps.smtp.url).host;
    return {
      mode: "smtp",
      outbox,
      queue: (conn, m, deliver) => outbox.enqueue(conn, m, deliver),
      withdrawCodes: (conn, to) => outbox.withdrawCodes(conn, to),
      describe: () => `mail: sign-in codes and notices are sent by SMTP through ${host} from a durable outbox`,
    };
  }
  const dev = createDevOutboxStore(boxes.dev);
  return {
    mode: "dev",
    outbox: undefined,
    queue: (conn, m, deliver) => dev.enqueue(conn, m, deliver),
    withdrawCodes: async () => 0,
    describe: () => "mail: SMTP_URL is not set; sign-in codes and notices stay in the dev outbox (`vaultgate dev outbox`) and reach nobody's inbox",
  };
}
