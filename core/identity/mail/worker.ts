import type { Logger } from "pino";
import { Counter } from "prom-client";
import { pollLoop } from "../../../lib/poll-loop.js";
import { coreRegistry } from "../../observability/metrics.js";
import type { MailOutboxStore } from "./outbox.js";
import { MailSendError, type MailTransport } from "./transport.js";

/** What became of each attempt, so an alert can see mail failing without reading the log. */
export const mailAttempts = new Counter({
  name: "vaultgate_mail_attempts_total",
  help: "Outbox mail by outcome: sent, retry (refused for now, stays queued), failed (given up for good), expired (its code expired unsent)",
  labelNames: ["outcome"] as const,
  registers: [coreRegistry],
});

export interface MailWorkerOptions {
  outbox: MailOutboxStore;
  transport: MailTransport;
  clock: () => Date;
  logger: Logger;
  /** How often the loop looks for due messages; 0 = no loop (call runOnce). */
  pollMs: number;
  /** First retry delay; doubles per failed attempt up to maxDelayMs, then a random part is taken off. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** How long after it was queued a message still failing for a passing reason is given up. */
  giveUpAfterMs?: number;
  /** How long a leased message belongs to this sender; must exceed the transport's timeout. */
  leaseMs?: number;
  /** Messages leased per pass, sent one after another. */
  batchSize?: number;
  /** Source of randomness for the jitter (tests pin it). */
  random?: () => number;
}

export interface MailWorker {
  /** Leases due messages and sends each once; resolves with how many were attempted. */
  runOnce(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * The delay before the next attempt after `attempts` failed ones: exponential, capped, and
 * with "equal jitter" (between half and all of it) so many messages refused at once do not
 * come back at the mail server at the same instant.
 */
export function mailBackoffMs(attempts: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const full = Math.min(maxMs, baseMs * 2 ** Math.min(30, Math.max(0, attempts - 1)));
  return Math.round(full / 2 + (full / 2) * random());
}

/** A mail server's own queue lifetime: past this an outage no longer just delays the message. */
export const MAIL_GIVE_UP_AFTER_MS = 5 * 24 * 3600_000;

/**
 * Sends the mail outbox: a message leaves only once a server accepted it, and a passing failure is
 * retried later (at least once, same Message-ID) for up to giveUpAfterMs; a permanent refusal ends
 * it at once, and a one-time code's message is dropped once the code has expired.
 */
export function createMailWorker(options: MailWorkerOptions): MailWorker {
  const baseMs = options.baseDelayMs ?? 5_000;
  const maxMs = options.maxDelayMs ?? 15 * 60_000;
  const giveUpMs = options.giveUpAfterMs ?? MAIL_GIVE_UP_AFTER_MS;
  const leaseMs = options.leaseMs ?? 120_000;
  const batchSize = options.batchSize ?? 20;
  const random = options.random ?? Math.random;
  const { outbox, transport, logger } = options;

  async function pass(): Promise<number> {
    if (loop.stopped) return 0;
    const now = options.clock();
    const leaseEnd = now.getTime() + leaseMs;
    const leased = await outbox.lease(now, new Date(leaseEnd), batchSize);
    for (const m of leased) {
      // A slow server outlasted the lease: the rest are due again, and another sender may hold them now.
      if (options.clock().getTime() >= leaseEnd) break;
      // Its code can no longer be used: receiving it late would only confuse the person.
      if (m.expiresAt && m.expiresAt.getTime() <= options.clock().getTime()) {
        if (await outbox.dropExpired(m.seq, m.attempts)) {
          mailAttempts.inc({ outcome: "expired" });
          logger.warn({ mail: m.id, attempts: m.attempts - 1 }, "mail dropped unsent: the one-time code in it has expired");
        }
        continue;
      }
      let error: string;
      let permanent = false;
      try {
        await transport.send({ id: m.id, to: m.to, subject: m.subject, body: m.body });
        mailAttempts.inc({ outcome: "sent" });
        if (!(await outbox.markSent(m.seq, m.attempts, options.clock()))) {
          logger.warn({ mail: m.id, attempts: m.attempts }, "mail sent after its lease passed to another attempt; not recorded");
        }
        continue;
      } catch (err) {
        error = err instanceof MailSendError ? err.message : err instanceof Error ? err.name : "send error";
        permanent = err instanceof MailSendError && err.permanent;
      }
      const at = options.clock();
      if (permanent || at.getTime() - m.createdAt.getTime() >= giveUpMs) {
        // The address and text stay out of the log; the row id finds them.
        const why = permanent ? "the server refused it permanently" : "it kept failing for too long";
        if (await outbox.markFailed(m.seq, m.attempts, at, error)) {
          mailAttempts.inc({ outcome: "failed" });
          logger.warn({ mail: m.id, attempts: m.attempts, error }, `mail given up unsent: ${why}; it will not be sent again`);
        } else logger.warn({ mail: m.id, attempts: m.attempts }, "mail attempt outlived its lease; result not recorded");
        continue;
      }
      const next = new Date(at.getTime() + mailBackoffMs(m.attempts, baseMs, maxMs, random));
      // The address and text stay out of the log; the row id finds them.
      mailAttempts.inc({ outcome: "retry" });
      logger.warn({ mail: m.id, attempts: m.attempts, error, next: next.toISOString() }, "mail not sent; it stays queued");
      if (!(await outbox.markRetry(m.seq, m.attempts, next, error))) {
        logger.warn({ mail: m.id, attempts: m.attempts }, "mail attempt outlived its lease; result not recorded");
      }
    }
    return leased.length;
  }

  const loop = pollLoop({ intervalMs: options.pollMs, pass, onError: (err) => logger.error({ err }, "mail pass failed") });

  return {
    runOnce: () => pass(),
    async stop() {
      await loop.stop();
      transport.close();
    },
  };
}
