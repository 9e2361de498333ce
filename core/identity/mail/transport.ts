import nodemailer from "nodemailer";
import { checkMailFrom, parseSmtpUrl } from "./settings.js";

/** One message as the outbox hands it to a transport (subject and body already opened). */
export interface OutgoingMail {
  /** The outbox row's id: the Message-ID, so a receiver can tell a resend from a new message. */
  id: string;
  to: string;
  subject: string;
  body: string;
}

/** Why an attempt failed, in words safe for a log line and the outbox row (never the message). */
export class MailSendError extends Error {
  override name = "MailSendError";
  constructor(
    message: string,
    /** The SMTP reply code when the server answered one (4xx or 5xx). */
    readonly responseCode?: number,
    /** The server refused this recipient or message for good (5xx to RCPT TO or DATA): sending again cannot help. */
    readonly permanent = false,
  ) {
    super(message);
  }
}

export interface MailTransport {
  send(mail: OutgoingMail): Promise<void>;
  close(): void;
}

export interface SmtpSettings {
  /** smtp:// (STARTTLS required unless `?starttls=optional`) or smtps:// (TLS from the start), credentials in the URL. */
  url: string;
  /** The From address of every message. */
  from: string;
  /** Connecting, the greeting and every reply share this limit. */
  timeoutMs?: number;
  /** Extra TLS options (tests trust their own CA with it). */
  tls?: { ca?: string; servername?: string };
}

/**
 * SMTP through nodemailer, one connection per message so no half-failed state carries over.
 * Every failure rejects with MailSendError (saying whether it is permanent) and the outbox decides what next.
 */
export function createSmtpTransport(settings: SmtpSettings): MailTransport {
  const server = parseSmtpUrl(settings.url);
  const problem = typeof server === "string" ? server : checkMailFrom(settings.from);
  if (typeof server === "string" || problem) throw new Error(problem);
  const timeoutMs = settings.timeoutMs ?? 20_000;
  const transport = nodemailer.createTransport({
    host: server.host,
    ...(server.port ? { port: server.port } : {}),
    secure: server.secure,
    // A code or the password in plaintext on a network is not sent: a stripped STARTTLS fails the attempt.
    requireTLS: server.requireStartTls,
    ...(server.auth ? { auth: server.auth } : {}),
    connectionTimeout: timeoutMs,
    greetingTimeout: timeoutMs,
    socketTimeout: timeoutMs,
    // nodemailer must not write the password (or messages) to a log.
    logger: false,
    debug: false,
    ...(settings.tls ? { tls: settings.tls } : {}),
  } as Parameters<typeof nodemailer.createTransport>[0]);
  const host = new URL(settings.url).hostname;
  const noStartTls = "SMTP server offers no STARTTLS (use smtps://, or smtp:// with ?starttls=optional to allow plaintext)";
  return {
    async send(mail) {
      try {
        await transport.sendMail({
          from: settings.from,
          // One recipient, taken literally: as a string nodemailer would read `a,b@evil.test` as a list.
          to: { name: "", address: mail.to },
          subject: mail.subject,
          text: mail.body,
          messageId: `<${mail.id}@${host}>`,
        });
      } catch (err) {
        const e = err as { responseCode?: number; code?: string; command?: string };
        const code = typeof e.responseCode === "number" ? e.responseCode : undefined;
        // A 5xx to the greeting, AUTH or MAIL FROM is our setup's problem, fixed for every message at once.
        const permanent = code !== undefined && code >= 500 && code < 600 && (e.command === "RCPT TO" || e.command === "DATA");
        if (e.command === "STARTTLS" && code !== undefined) throw new MailSendError(noStartTls, code);
        // Only the reply code or the error's code: a server's reply text may quote the message.
        throw new MailSendError(code !== undefined ? `SMTP ${code}` : `SMTP ${e.code ?? "error"}`, code, permanent);
      }
    },
    close() {
      transport.close();
    },
  };
}
