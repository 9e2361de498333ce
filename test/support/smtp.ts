import { SMTPServer } from "smtp-server";
import type { Db } from "../../core/db/knex.js";
import { createMailer } from "../../core/identity/mail/mailer.js";
import { createSmtpTransport } from "../../core/identity/mail/transport.js";
import { createMailWorker } from "../../core/identity/mail/worker.js";
import type { TestClock } from "./clock.js";
import { createCapturedLogger } from "./logs.js";

/** A message as the test SMTP server received it. */
export interface ReceivedMail {
  from: string;
  to: string[];
  subject: string;
  messageId: string;
  /** The text body, transfer encoding undone. */
  text: string;
  raw: string;
  /** True when the message came over TLS (STARTTLS). */
  secure: boolean;
}

/** What the server answers to a message: accept, or refuse with an SMTP reply code. */
export type SmtpAnswer = { accept: true } | { accept: false; code: number };

/** Undoes quoted-printable (soft line breaks, =XX escapes). */
function decodeQuotedPrintable(s: string): string {
  const bytes = s.replace(/=\r?\n/g, "").replace(/=([0-9A-F]{2})/gi, (_m, h: string) => String.fromCharCode(parseInt(h, 16)));
  return Buffer.from(bytes, "latin1").toString("utf8");
}

function parse(raw: string, from: string, to: string[], secure: boolean): ReceivedMail {
  const split = raw.indexOf("\r\n\r\n");
  const head = raw.slice(0, split).replace(/\r\n[ \t]+/g, " ");
  const body = raw.slice(split + 4);
  const header = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, "im").exec(head)?.[1]?.trim() ?? "";
  const encoding = header("Content-Transfer-Encoding").toLowerCase();
  const text = encoding === "quoted-printable" ? decodeQuotedPrintable(body) : encoding === "base64" ? Buffer.from(body, "base64").toString("utf8") : body;
  return { from, to, subject: header("Subject"), messageId: header("Message-ID"), text: text.replace(/\r\n$/, ""), raw, secure };
}

/**
 * A real SMTP server (`smtp-server`) on 127.0.0.1 recording what it accepts. `answer()` decides at DATA (4xx,
 * 5xx, or a held reply), `refuseRecipient()` at RCPT TO; `auth` requires that user and password; `starttls`
 * (a certificate for 127.0.0.1) offers STARTTLS, and without it `url` allows plaintext.
 */
export async function startSmtpServer(
  options: {
    answer?: () => SmtpAnswer | Promise<SmtpAnswer>;
    auth?: { user: string; pass: string };
    port?: number;
    starttls?: { key: string; cert: string };
  } = {},
) {
  const received: ReceivedMail[] = [];
  const refused: { code: number }[] = [];
  let answer: () => SmtpAnswer | Promise<SmtpAnswer> = options.answer ?? (() => ({ accept: true }) as SmtpAnswer);
  let waiters: (() => void)[] = [];
  // Recipients the server refuses at RCPT TO, with the reply code.
  const refusedRecipients = new Map<string, number>();
  const auths: { secure: boolean }[] = [];
  const server = new SMTPServer({
    secure: false,
    ...(options.starttls ?? {}),
    disabledCommands: [...(options.starttls ? [] : ["STARTTLS"]), ...(options.auth ? [] : ["AUTH"])],
    allowInsecureAuth: true,
    authOptional: !options.auth,
    logger: false,
    onAuth(auth, session, cb) {
      auths.push({ secure: session.secure });
      if (options.auth && auth.username === options.auth.user && auth.password === options.auth.pass) return cb(null, { user: auth.username });
      const err = Object.assign(new Error("authentication failed"), { responseCode: 535 });
      return cb(err);
    },
    onRcptTo(address, _session, cb) {
      const code = refusedRecipients.get(address.address.toLowerCase());
      if (code === undefined) return cb();
      refused.push({ code });
      return cb(Object.assign(new Error(code >= 500 ? "mailbox unavailable" : "try again later"), { responseCode: code }));
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", async () => {
        // A promise holds the reply back: a slow server.
        const a = await answer();
        if (!a.accept) {
          refused.push({ code: a.code });
          return cb(Object.assign(new Error(a.code >= 500 ? "mailbox unavailable" : "try again later"), { responseCode: a.code }));
        }
        const from = session.envelope.mailFrom ? session.envelope.mailFrom.address : "";
        received.push(
          parse(
            Buffer.concat(chunks).toString("utf8"),
            from,
            session.envelope.rcptTo.map((r) => r.address),
            session.secure,
          ),
        );
        cb();
        const w = waiters;
        waiters = [];
        for (const f of w) f();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const port = (server.server.address() as { port: number }).port;
  return {
    port,
    /** smtp://[user:pass@]127.0.0.1:port, with ?starttls=optional when the server offers no STARTTLS. */
    url: `smtp://${options.auth ? `${encodeURIComponent(options.auth.user)}:${encodeURIComponent(options.auth.pass)}@` : ""}127.0.0.1:${port}${options.starttls ? "" : "?starttls=optional"}`,
    received,
    /** Every AUTH the server was sent, and whether it came over TLS. */
    auths,
    refused,
    setAnswer(f: () => SmtpAnswer | Promise<SmtpAnswer>) {
      answer = f;
    },
    /** Refuses this address at RCPT TO with `code` (e.g. 550 or 451); undefined accepts it again. */
    refuseRecipient(address: string, code: number | undefined) {
      if (code === undefined) refusedRecipients.delete(address.toLowerCase());
      else refusedRecipients.set(address.toLowerCase(), code);
    },
    /** Messages to one address, oldest first. */
    to(address: string) {
      return received.filter((m) => m.to.includes(address));
    },
    /** Resolves once `n` messages in all have been accepted. */
    async waitFor(n: number): Promise<void> {
      while (received.length < n) await new Promise<void>((resolve) => waiters.push(resolve));
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

export type TestSmtpServer = Awaited<ReturnType<typeof startSmtpServer>>;

/** The six-digit code in a sign-in code message. */
export function codeIn(mail: ReceivedMail): string {
  const m = /\b(\d{6})\b/.exec(mail.subject) ?? /\b(\d{6})\b/.exec(mail.text);
  if (!m) throw new Error(`no code in message ${JSON.stringify(mail.subject)}`);
  return m[1]!;
}

/**
 * A mailer queueing to `db`'s outbox for the SMTP server at `url`, and a worker that drains it when
 * the test runs a pass (no polling; retries 1 s apart at first, at most 16 s), logging to `log`.
 */
export function mailHarness(o: { db: Db; signinCodeKey: Buffer; url: string; from: string; clock: TestClock }) {
  const mailer = createMailer({ db: o.db, signinCodeKey: o.signinCodeKey, smtp: { url: o.url, from: o.from } });
  const log = createCapturedLogger();
  const worker = createMailWorker({
    outbox: mailer.outbox!,
    transport: createSmtpTransport({ url: o.url, from: o.from, timeoutMs: 5_000 }),
    clock: o.clock,
    logger: log.logger,
    pollMs: 0,
    baseDelayMs: 1_000,
    maxDelayMs: 16_000,
  });
  return { mailer, worker, log };
}
