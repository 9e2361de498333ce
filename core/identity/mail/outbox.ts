import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import type { Db } from "../../db/knex.js";
import { deriveKey } from "../../keys/outside-keys.js";
import { createSecretBox, type SecretBox } from "../../../lib/crypto.js";
import { pruneBatchSql } from "../../db/sql.js";
import { quotedExcerpt } from "../../../lib/text.js";

/**
 * A message to queue: who gets it, and its text (sealed before it is stored). Queued with
 * `deliver` false it is sealed and its statement sent all the same, but no row is written.
 */
export interface MailMessage {
  to: string;
  subject: string;
  body: string;
  at: Date;
  /** A message carrying a one-time code: the code's expiry, after which the message is dropped unsent. */
  expiresAt?: Date;
}

/** A leased outbox row, opened. */
export interface LeasedMail {
  seq: number;
  id: string;
  to: string;
  subject: string;
  body: string;
  /** The attempt this lease is (1 for the first); results are recorded only for the latest. */
  attempts: number;
  createdAt: Date;
  /** Past this the message is not sent (null: it never expires). */
  expiresAt: Date | null;
}

/** Marks a text sealed under the outside key. */
const SEALED = "sealed:";

/** The boxes both outboxes seal under: sub-keys of the sign-in code key, one per table. */
export function mailBoxes(signinCodeKey: Buffer): { smtp: SecretBox; dev: SecretBox } {
  return { smtp: createSecretBox(deriveKey(signinCodeKey, "mail outbox")), dev: createSecretBox(deriveKey(signinCodeKey, "dev outbox")) };
}

/**
 * The SQL of the mail outbox (migration 0033). Rows are written in the caller's
 * transaction; a sender leases due rows with SKIP LOCKED, so concurrent senders (on any
 * replica) never take the same row while its lease runs.
 */
export function createMailOutboxStore(db: Db, box: SecretBox) {
  const open = (text: string) => (text.startsWith(SEALED) ? box.open(text.slice(SEALED.length)) : text);
  return {
    async enqueue(conn: Knex | Knex.Transaction, m: MailMessage, deliver = true): Promise<string> {
      const id = randomUUID();
      await conn.raw(
        `INSERT INTO mail_outbox (id, recipient, subject, body, created_at, next_attempt_at, expires_at)
         SELECT ?::uuid, ?, ?, ?, ?::timestamptz, ?::timestamptz, ?::timestamptz WHERE ?::boolean`,
        [id, m.to, SEALED + box.seal(m.subject), SEALED + box.seal(m.body), m.at, m.at, m.expiresAt ?? null, deliver],
      );
      return id;
    },

    /**
     * Takes up to `limit` due messages, oldest due first: each one's attempt counter goes up
     * and its next attempt moves to the lease's end, so if this sender dies the message is
     * simply due again then.
     */
    async lease(now: Date, leaseUntil: Date, limit: number): Promise<LeasedMail[]> {
      const res = await db.raw(
        `UPDATE mail_outbox SET attempts = attempts + 1, next_attempt_at = ?
          WHERE seq IN (SELECT seq FROM mail_outbox WHERE state = 'pending' AND next_attempt_at <= ?
                         ORDER BY next_attempt_at, seq LIMIT ? FOR UPDATE SKIP LOCKED)
          RETURNING seq, id, recipient, subject, body, attempts, created_at, expires_at`,
        [leaseUntil, now, limit],
      );
      const rows = (res.rows ?? []) as {
        seq: number;
        id: string;
        recipient: string;
        subject: string;
        body: string;
        attempts: number;
        created_at: Date | string;
        expires_at: Date | string | null;
      }[];
      return rows
        .map((r) => ({
          seq: Number(r.seq),
          id: r.id,
          to: r.recipient,
          subject: open(r.subject),
          body: open(r.body),
          attempts: Number(r.attempts),
          createdAt: new Date(r.created_at),
          expiresAt: r.expires_at == null ? null : new Date(r.expires_at),
        }))
        .sort((a, b) => a.seq - b.seq);
    },

    /** Records a delivery; false when a later lease owns the row (its result decides). */
    async markSent(seq: number, attempts: number, at: Date): Promise<boolean> {
      const res = await db.raw(
        `UPDATE mail_outbox SET state = 'sent', sent_at = ?, last_error = NULL WHERE seq = ? AND attempts = ? AND state = 'pending' RETURNING seq`,
        [at, seq, attempts],
      );
      return (res.rows ?? []).length === 1;
    },

    /** Ends a message that will not be sent; false when a later lease owns the row. */
    async markFailed(seq: number, attempts: number, at: Date, error: string): Promise<boolean> {
      const res = await db.raw(
        `UPDATE mail_outbox SET state = 'failed', failed_at = ?, last_error = ? WHERE seq = ? AND attempts = ? AND state = 'pending' RETURNING seq`,
        [at, quotedExcerpt(error, 200), seq, attempts],
      );
      return (res.rows ?? []).length === 1;
    },

    /** Removes an unsent message that expired; false when a later lease owns the row. */
    async dropExpired(seq: number, attempts: number): Promise<boolean> {
      const res = await db.raw(`DELETE FROM mail_outbox WHERE seq = ? AND attempts = ? AND state = 'pending' RETURNING seq`, [seq, attempts]);
      return (res.rows ?? []).length === 1;
    },

    /** Schedules the next attempt after a failed one; false when a later lease owns the row. */
    async markRetry(seq: number, attempts: number, next: Date, error: string): Promise<boolean> {
      const res = await db.raw(
        `UPDATE mail_outbox SET next_attempt_at = ?, last_error = ? WHERE seq = ? AND attempts = ? AND state = 'pending' RETURNING seq`,
        [next, quotedExcerpt(error, 200), seq, attempts],
      );
      return (res.rows ?? []).length === 1;
    },

    /**
     * Deletes the unsent one-time code messages to any of `recipients`, in the caller's transaction;
     * notices stay. A message a sender is handing to the server already may still arrive.
     */
    async withdrawCodes(conn: Knex | Knex.Transaction, recipients: string[]): Promise<number> {
      const res = await conn.raw(`DELETE FROM mail_outbox WHERE state = 'pending' AND expires_at IS NOT NULL AND recipient = ANY(?::text[]) RETURNING seq`, [
        recipients,
      ]);
      return (res.rows ?? []).length;
    },

    /** How many messages wait (for /readyz-like checks and tests). */
    async pending(): Promise<number> {
      const row = await db("mail_outbox").where({ state: "pending" }).count<{ n: number }[]>({ n: "*" }).first();
      return Number(row?.n ?? 0);
    },
  };
}

export type MailOutboxStore = ReturnType<typeof createMailOutboxStore>;

/** The development outbox: messages nobody receives, readable with `vaultgate dev outbox`. */
export function createDevOutboxStore(box: SecretBox) {
  const unseal = (text: string) => {
    if (!text.startsWith(SEALED)) return text; // rows written before texts were sealed
    try {
      return box.open(text.slice(SEALED.length));
    } catch {
      return "(sealed under another key)";
    }
  };
  return {
    async enqueue(conn: Knex | Knex.Transaction, m: MailMessage, deliver = true): Promise<string> {
      const id = randomUUID();
      await conn.raw(`INSERT INTO dev_outbox (id, email, subject, body, created_at) SELECT ?::uuid, ?, ?, ?, ?::timestamptz WHERE ?::boolean`, [
        id,
        m.to,
        SEALED + box.seal(m.subject),
        SEALED + box.seal(m.body),
        m.at,
        deliver,
      ]);
      return id;
    },

    /** The newest messages, opened (to one address when given). */
    async list(conn: Knex | Knex.Transaction, email: string | undefined, limit = 100) {
      const q = conn("dev_outbox").orderBy("seq", "desc").limit(limit);
      if (email) q.where({ email });
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({
        email: String(r.email),
        subject: unseal(String(r.subject)),
        body: unseal(String(r.body)),
        createdAt: new Date(r.created_at as string),
      }));
    },
  };
}

export type DevOutboxStore = ReturnType<typeof createDevOutboxStore>;

/** The pruner's batch: development messages written before the cutoff. */
export const PRUNE_DEV_OUTBOX = { table: "dev_outbox", sql: pruneBatchSql("dev_outbox", "created_at < ?", "created_at") } as const;

/** The pruner's batch: messages sent or given up before the cutoff (pending ones stay). */
export const PRUNE_MAIL_OUTBOX = {
  table: "mail_outbox",
  sql: pruneBatchSql("mail_outbox", "(state = 'sent' AND sent_at < ?) OR (state = 'failed' AND failed_at < ?)", "seq"),
  bindings: (cutoff: Date, batch: number) => [cutoff, cutoff, batch],
} as const;
