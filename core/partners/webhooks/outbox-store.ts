import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import type { Db } from "../../db/knex.js";
import { FEED_AFTER_SQL, FEED_COLUMNS_SQL, readSettled, toFeedRead, type FeedPosition } from "../../paging.js";

type Conn = Knex | Knex.Transaction;

/** The four event kinds of DESIGN 4.3. */
export type EventType = "kyc.status_changed" | "transfer.settled" | "transfer.failed" | "payout.executed";

export interface PartnerEvent {
  seq: number;
  id: string;
  partnerId: string;
  type: EventType;
  data: Record<string, unknown>;
  createdAt: Date;
}

export interface DueDelivery extends PartnerEvent {
  attempts: number;
  webhookUrl: string;
  webhookSecretEnc: string;
}

/**
 * Writes one event for one partner into the durable outbox (it is also the partner's
 * GET /events feed). Call it inside the transaction of the change it reports, so the
 * event exists exactly when the change does.
 *
 * The row records its transaction's id (column default, migration 0014) and the feed reads
 * up to the commit horizon (core/paging.ts), so writers take no lock: a row that commits
 * late still reaches every reader exactly once.
 */
export async function enqueue(
  trx: Knex.Transaction,
  partnerId: string,
  type: EventType,
  data: Record<string, unknown>,
  at: Date,
): Promise<{ eventId: string; seq: number }> {
  const id = randomUUID();
  const { rows } = await trx.raw(
    `INSERT INTO partner_events (id, partner_id, type, data, created_at, next_attempt_at) VALUES (?, ?, ?, ?::jsonb, ?, ?) RETURNING seq`,
    [id, partnerId, type, JSON.stringify(data), at, at],
  );
  return { eventId: id, seq: Number((rows as { seq: number }[])[0]!.seq) };
}

/** Reads and delivery bookkeeping of the outbox. */
export function createOutboxStore(db: Db) {
  return {
    /** The partner's settled events strictly after `after`, in feed order (core/paging.ts). */
    async list(conn: Conn, partnerId: string, after: FeedPosition, limit: number): Promise<{ row: PartnerEvent; position: FeedPosition }[]> {
      return readSettled(async () => {
        const { rows } = await conn.raw(
          `SELECT seq, id, partner_id, type, data, created_at, ${FEED_COLUMNS_SQL} FROM partner_events
            WHERE partner_id = ? AND ${FEED_AFTER_SQL} ORDER BY xid, seq LIMIT ?`,
          [partnerId, after.xid, after.seq, limit],
        );
        return (rows as Record<string, unknown>[]).map((r) => toFeedRead(r, toEvent(r)));
      });
    },

    /**
     * Claims due deliveries of active partners with a webhook, leasing each until
     * `leaseUntil`: a worker that dies mid-delivery leaves the event due again after the
     * lease, so delivery survives a restart. Suspended partners' events stay pending.
     */
    async claimDue(now: Date, leaseUntil: Date, limit: number): Promise<DueDelivery[]> {
      return db.transaction(async (trx) => {
        const { rows } = await trx.raw(
          `SELECT e.seq, e.id, e.partner_id, e.type, e.data, e.created_at, e.attempts, p.webhook_url, p.webhook_secret_enc
             FROM partner_events e JOIN partners p ON p.id = e.partner_id
            WHERE e.delivery_state = 'pending' AND e.next_attempt_at <= ?
              AND p.status = 'active' AND p.webhook_url IS NOT NULL AND p.webhook_secret_enc IS NOT NULL
            ORDER BY e.seq LIMIT ? FOR UPDATE OF e SKIP LOCKED`,
          [now, limit],
        );
        const due = (rows as Record<string, unknown>[]).map((r) => ({
          ...toEvent(r),
          attempts: Number(r.attempts) + 1,
          webhookUrl: String(r.webhook_url),
          webhookSecretEnc: String(r.webhook_secret_enc),
        }));
        if (due.length > 0) {
          await trx.raw(`UPDATE partner_events SET attempts = attempts + 1, next_attempt_at = ? WHERE seq = ANY(?::bigint[])`, [
            leaseUntil,
            `{${due.map((d) => d.seq).join(",")}}`,
          ]);
        }
        return due;
      });
    },

    async markDelivered(seq: number, at: Date): Promise<void> {
      await db.raw(`UPDATE partner_events SET delivery_state = 'delivered', delivered_at = ?, last_error = NULL WHERE seq = ?`, [at, seq]);
    },

    async markRetry(seq: number, next: Date | undefined, error: string): Promise<void> {
      if (next) await db.raw(`UPDATE partner_events SET next_attempt_at = ?, last_error = ? WHERE seq = ?`, [next, error, seq]);
      else await db.raw(`UPDATE partner_events SET delivery_state = 'failed', last_error = ? WHERE seq = ?`, [error, seq]);
    },

    async setWebhook(trx: Knex.Transaction, clientId: string, url: string | null, secretEnc: string | null): Promise<boolean> {
      const n = await trx("partners").where({ client_id: clientId }).update({ webhook_url: url, webhook_secret_enc: secretEnc });
      return Number(n) > 0;
    },
  };
}

export type OutboxStore = ReturnType<typeof createOutboxStore>;

function toEvent(r: Record<string, unknown>): PartnerEvent {
  return {
    seq: Number(r.seq),
    id: String(r.id),
    partnerId: String(r.partner_id),
    type: r.type as EventType,
    data: (typeof r.data === "string" ? JSON.parse(r.data) : r.data) as Record<string, unknown>,
    createdAt: r.created_at instanceof Date ? r.created_at : new Date(String(r.created_at)),
  };
}
