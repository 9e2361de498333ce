import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import type { Db } from "../../db/knex.js";
import { CONSENT_SCOPES, TREASURY_SCOPE, type ConsentScope } from "../../../lib/vocabulary.js";
import { pruneBatchSql } from "../../db/sql.js";
import { createUsersStore } from "../../identity/users-store.js";
import { createPartnersStore } from "../store.js";
import { textArray } from "../../db/rows.js";
import { FEED_AFTER_SQL, FEED_COLUMNS_SQL, readSettled, toFeedRead, type FeedPosition } from "../../paging.js";

type Conn = Knex | Knex.Transaction;

/** The four partner webhook event kinds. */
export type EventType = "kyc.status_changed" | "transfer.settled" | "transfer.failed" | "payout.executed";

/** The user's events each consent scope lets a partner receive (payout.executed is the paying partner's own). */
export const CONSENT_EVENT_TYPES: Partial<Record<ConsentScope, EventType[]>> = {
  "kyc:read": ["kyc.status_changed"],
  "transfers:read": ["transfer.settled", "transfer.failed"],
};

/** The scope each event kind needs, in the token that lists it and in the entitlements of the partner it is sent to. */
export const EVENT_SCOPE: Readonly<Record<EventType, string>> = {
  "kyc.status_changed": "kyc:read",
  "transfer.settled": "transfers:read",
  "transfer.failed": "transfers:read",
  "payout.executed": TREASURY_SCOPE,
};

/** The event kinds `scopes` cover: a user's events need their consent scope, payout receipts treasury:write. */
export function eventTypesFor(scopes: readonly string[]): EventType[] {
  const types = CONSENT_SCOPES.filter((s) => scopes.includes(s)).flatMap((s) => CONSENT_EVENT_TYPES[s] ?? []);
  return scopes.includes(TREASURY_SCOPE) ? [...types, "payout.executed"] : types;
}

/** SQL true when partner `p` is entitled to receive event `e` now (constants only, no bindings). */
const ENTITLED_SQL = `(CASE e.type ${Object.entries(EVENT_SCOPE)
  .map(([type, scope]) => `WHEN '${type}' THEN '${scope}'`)
  .join(" ")} END) = ANY (p.entitlements)`;

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
  /** The partner's SetWebhook count when leased: a later SetWebhook, even of the same URL, supersedes this attempt. */
  webhookGeneration: number;
  webhookSecretEnc: string;
  /** The secret before the latest rotation, while its overlap lasts: deliveries are signed with both. */
  previousSecretEnc: string | null;
}

/** A partner's sealed webhook secrets (the previous one with the end of its overlap). */
export interface WebhookSecrets {
  current: string | null;
  previous: { enc: string; until: Date } | null;
}

/** How long a rotated-out webhook secret still signs deliveries beside the new one. */
export const WEBHOOK_SECRET_OVERLAP_MS = 24 * 3600_000;

/** What every insert into the outbox writes: an event is due as soon as it exists. */
const EVENT_COLUMNS = "id, partner_id, type, data, created_at, next_attempt_at";

/**
 * Writes one event into the outbox (also the GET /events feed) inside the change's transaction, so
 * it exists exactly when the change does. No lock: the feed reads up to the commit horizon
 * (core/paging.ts), so a late commit still reaches every reader once.
 */
export async function enqueue(
  trx: Knex.Transaction,
  partnerId: string,
  type: EventType,
  data: Record<string, unknown>,
  at: Date,
): Promise<{ eventId: string; seq: number }> {
  const id = randomUUID();
  const { rows } = await trx.raw(`INSERT INTO partner_events (${EVENT_COLUMNS}) VALUES (?, ?, ?, ?::jsonb, ?, ?) RETURNING seq`, [
    id,
    partnerId,
    type,
    JSON.stringify(data),
    at,
    at,
  ]);
  return { eventId: id, seq: Number((rows as { seq: number }[])[0]!.seq) };
}

/**
 * A CTE `name` enqueueing, as enqueue does, one event per row of `events`: a SELECT of (n, partner_id,
 * type, data), inserted in (n, partner_id) order, so a change and its events cost one statement.
 */
export function enqueueCte(name: string, events: { sql: string; bindings: Knex.RawBinding[] }, at: Date): { sql: string; bindings: Knex.RawBinding[] } {
  return {
    sql: `${name} AS (
            INSERT INTO partner_events (${EVENT_COLUMNS})
            SELECT gen_random_uuid(), e.partner_id, e.type, e.data, ?::timestamptz, ?::timestamptz
              FROM (${events.sql}) e
             ORDER BY e.n, e.partner_id
          )`,
    bindings: [at, at, ...events.bindings],
  };
}

/** Reads and delivery bookkeeping of the outbox. */
export function createOutboxStore(db: Db) {
  const users = createUsersStore();
  const partners = createPartnersStore(db);
  return {
    /**
     * Age in seconds of the oldest due, undelivered event the worker would send now (0 when none):
     * leased and backing-off events, and those of partners not active or without a webhook, do not count.
     */
    async oldestDueAgeSeconds(now: Date): Promise<number> {
      const { rows } = await db.raw(
        `SELECT min(e.next_attempt_at) AS oldest FROM partner_events e JOIN partners p ON p.id = e.partner_id
          WHERE e.delivery_state = 'pending' AND e.next_attempt_at <= ?
            AND p.status = 'active' AND p.webhook_url IS NOT NULL AND p.webhook_secret_enc IS NOT NULL AND p.webhook_gone_at IS NULL AND ${ENTITLED_SQL}`,
        [now],
      );
      const oldest = (rows as { oldest: Date | string | null }[])[0]?.oldest;
      return oldest ? Math.max(0, (now.getTime() - new Date(oldest).getTime()) / 1000) : 0;
    },

    /** The partner's settled events of `types` strictly after `after`, in feed order (core/paging.ts). */
    async list(
      conn: Conn,
      partnerId: string,
      types: readonly EventType[],
      after: FeedPosition,
      limit: number,
    ): Promise<{ row: PartnerEvent; position: FeedPosition }[]> {
      if (types.length === 0) return [];
      return readSettled(async () => {
        const { rows } = await conn.raw(
          `SELECT seq, id, partner_id, type, data, created_at, ${FEED_COLUMNS_SQL} FROM partner_events
            WHERE partner_id = ? AND type = ANY(?::text[]) AND ${FEED_AFTER_SQL} ORDER BY xid, seq LIMIT ?`,
          [partnerId, [...types], after.xid, after.seq, limit],
        );
        return (rows as Record<string, unknown>[]).map((r) => toFeedRead(r, toEvent(r)));
      });
    },

    /**
     * Takes up to `limit` free (or expired) delivery lanes of partners with due events, each by
     * one atomic upsert, so two replicas never deliver the same partner's events at once.
     */
    async claimLanes(now: Date, leaseUntil: Date, limit: number): Promise<Lane[]> {
      const token = randomUUID();
      const { rows } = await db.raw(
        `WITH due AS (
           SELECT e.partner_id, min(e.seq) AS first_seq
             FROM partner_events e JOIN partners p ON p.id = e.partner_id
            WHERE e.delivery_state = 'pending' AND e.next_attempt_at <= ?
              AND p.status = 'active' AND p.webhook_url IS NOT NULL AND p.webhook_secret_enc IS NOT NULL AND p.webhook_gone_at IS NULL AND ${ENTITLED_SQL}
              AND NOT EXISTS (SELECT 1 FROM webhook_lanes l WHERE l.partner_id = e.partner_id AND l.leased_until > ?)
            GROUP BY e.partner_id ORDER BY first_seq LIMIT ?
         )
         INSERT INTO webhook_lanes (partner_id, lease_token, leased_until)
         SELECT partner_id, ?, ? FROM due
         ON CONFLICT (partner_id) DO UPDATE SET lease_token = EXCLUDED.lease_token, leased_until = EXCLUDED.leased_until
          WHERE webhook_lanes.leased_until <= ?
         RETURNING partner_id, lease_token`,
        [now, now, limit, token, leaseUntil, now],
      );
      return (rows as { partner_id: string; lease_token: string }[]).map((r) => ({ partnerId: String(r.partner_id), token: String(r.lease_token) }));
    },

    /**
     * Before each request: renews the lane (fenced by its token), rereads the partner FOR SHARE so
     * a status change being committed is never missed, and leases the first due event.
     * `lost`: another worker holds the lane; `stop`: partner inactive or no webhook; `idle`: nothing due.
     */
    async leaseNext(lane: Lane, now: Date, leaseUntil: Date): Promise<LeaseStep> {
      return db.transaction(async (trx) => {
        const renewed = await trx.raw(`UPDATE webhook_lanes SET leased_until = ? WHERE partner_id = ? AND lease_token = ? RETURNING partner_id`, [
          leaseUntil,
          lane.partnerId,
          lane.token,
        ]);
        if ((renewed.rows as unknown[]).length === 0) return { kind: "lost" } as const;
        const partner = (
          await trx.raw(
            `SELECT status, entitlements, webhook_url, webhook_generation, webhook_gone_at, webhook_secret_enc, CASE WHEN webhook_secret_prev_until > ? THEN webhook_secret_prev_enc END AS prev_enc
               FROM partners WHERE id = ? FOR SHARE`,
            [now, lane.partnerId],
          )
        ).rows[0] as
          | {
              status: string;
              entitlements: unknown;
              webhook_url: string | null;
              webhook_generation: number;
              webhook_gone_at: unknown;
              webhook_secret_enc: string | null;
              prev_enc: string | null;
            }
          | undefined;
        if (partner?.status !== "active" || partner.webhook_url == null || partner.webhook_gone_at != null || partner.webhook_secret_enc == null)
          return { kind: "stop" } as const;
        // Only the kinds the partner is entitled to now; the others wait, as they would for a suspension.
        // Feed order (writing xid, then seq): a change that began first is sent first, whichever committed first.
        const types = eventTypesFor(textArray(partner.entitlements));
        const { rows } = await trx.raw(
          `SELECT seq, id, partner_id, type, data, created_at, attempts FROM partner_events
            WHERE partner_id = ? AND delivery_state = 'pending' AND next_attempt_at <= ? AND type = ANY(?::text[])
            ORDER BY xid, seq LIMIT 1 FOR UPDATE`,
          [lane.partnerId, now, types],
        );
        const row = (rows as Record<string, unknown>[])[0];
        if (!row) return { kind: "idle" } as const;
        await trx.raw(`UPDATE partner_events SET attempts = attempts + 1, next_attempt_at = ? WHERE seq = ?`, [leaseUntil, Number(row.seq)]);
        const delivery: DueDelivery = {
          ...toEvent(row),
          attempts: Number(row.attempts) + 1,
          webhookUrl: partner.webhook_url,
          webhookGeneration: Number(partner.webhook_generation),
          webhookSecretEnc: partner.webhook_secret_enc,
          previousSecretEnc: partner.prev_enc ?? null,
        };
        return { kind: "deliver", delivery } as const;
      });
    },

    /**
     * Runs `send` (writing the request) only if the event is still this attempt's, its partner active, entitled and at the
     * leased URL, its user active, holding user and partner FOR SHARE until it resolves: a deactivation, consent withdrawal,
     * suspension or URL change commits before (nothing leaves; `held` gives the attempt back) or after the request is out.
     */
    async whileSendable(d: DueDelivery, send: () => Promise<void>): Promise<"sent" | "withdrawn" | "held" | "lost"> {
      return db.transaction(async (trx) => {
        const userId = d.data.user_id;
        if (typeof userId === "string" && (await users.holdUserStatus(trx, userId)) !== "active") return "withdrawn";
        const partner = await partners.holdForDelivery(trx, d.partnerId);
        const event = (await trx.raw(`SELECT attempts FROM partner_events WHERE seq = ? AND delivery_state = 'pending'`, [d.seq])).rows[0] as
          | { attempts: number }
          | undefined;
        if (!event) return "withdrawn";
        if (Number(event.attempts) !== d.attempts) return "lost";
        // The webhook set again (even to the same URL) or removed since the lease: the attempt is re-leased under the new one.
        const moved = partner?.webhookGeneration !== d.webhookGeneration;
        if (partner?.status !== "active" || moved || !eventTypesFor(partner.entitlements).includes(d.type)) {
          await trx.raw(`UPDATE partner_events SET attempts = attempts - 1, next_attempt_at = created_at WHERE seq = ?`, [d.seq]);
          return "held";
        }
        await send();
        return "sent";
      });
    },

    /** Gives the lane back at once (a no-op if another worker took it meanwhile). */
    async releaseLane(lane: Lane): Promise<void> {
      await db.raw(`DELETE FROM webhook_lanes WHERE partner_id = ? AND lease_token = ?`, [lane.partnerId, lane.token]);
    },

    /**
     * Records a 2xx for attempt `attempt`. False (nothing written) when the event was leased
     * again since: that attempt's lease ran out and another worker owns the event now.
     */
    async markDelivered(seq: number, attempt: number, at: Date): Promise<boolean> {
      const res = await db.raw(
        `UPDATE partner_events SET delivery_state = 'delivered', delivered_at = ?, last_error = NULL WHERE seq = ? AND attempts = ? AND delivery_state = 'pending' RETURNING seq`,
        [at, seq, attempt],
      );
      return (res.rows as unknown[]).length > 0;
    },

    /**
     * Records a 410 Gone for attempt `attempt` of `d`: the event is due again at once (first in order) and, if no SetWebhook
     * came since the lease (the generation, not the URL string), deliveries pause until one does. Fenced like markRetry.
     */
    async markGone(d: DueDelivery, at: Date): Promise<"paused" | "moved" | "lost"> {
      return db.transaction(async (trx) => {
        // The partner row first, as leaseNext takes them, so the two never wait on each other crosswise.
        const paused = await trx.raw(
          `UPDATE partners SET webhook_gone_at = ? WHERE id = ? AND webhook_generation = ? AND webhook_gone_at IS NULL
              AND EXISTS (SELECT 1 FROM partner_events WHERE seq = ? AND attempts = ? AND delivery_state = 'pending') RETURNING id`,
          [at, d.partnerId, d.webhookGeneration, d.seq, d.attempts],
        );
        const kept = await trx.raw(
          `UPDATE partner_events SET next_attempt_at = created_at, last_error = 'HTTP 410' WHERE seq = ? AND attempts = ? AND delivery_state = 'pending' RETURNING seq`,
          [d.seq, d.attempts],
        );
        if ((kept.rows as unknown[]).length === 0) return "lost";
        return (paused.rows as unknown[]).length > 0 ? "paused" : "moved";
      });
    },

    /** Records a failed attempt (next try at `next`, or `failed` when undefined); fenced like markDelivered. */
    async markRetry(seq: number, attempt: number, next: Date | undefined, error: string): Promise<boolean> {
      const res = next
        ? await db.raw(
            `UPDATE partner_events SET next_attempt_at = ?, last_error = ? WHERE seq = ? AND attempts = ? AND delivery_state = 'pending' RETURNING seq`,
            [next, error, seq, attempt],
          )
        : await db.raw(
            `UPDATE partner_events SET delivery_state = 'failed', last_error = ? WHERE seq = ? AND attempts = ? AND delivery_state = 'pending' RETURNING seq`,
            [error, seq, attempt],
          );
      return (res.rows as unknown[]).length > 0;
    },

    /**
     * Drops a partner's events of `types` about one user, delivered or not, from the outbox and
     * the feed: the user withdrew the consent they were sent under. Run under the user's row lock.
     */
    async withdrawUserEvents(trx: Knex.Transaction, partnerId: string, userId: string, types: EventType[]): Promise<number> {
      if (types.length === 0) return 0;
      const { rows } = await trx.raw(
        `DELETE FROM partner_events WHERE partner_id = ? AND type = ANY(?::text[]) AND lower(data->>'user_id') = ?::uuid::text RETURNING 1`,
        [partnerId, types, userId],
      );
      return (rows as unknown[]).length;
    },

    /** Drops every partner's events about one user (deactivated: their data no longer flows). Run under the user's row lock. */
    async dropUserEvents(trx: Knex.Transaction, userId: string): Promise<number> {
      const { rows } = await trx.raw(`DELETE FROM partner_events WHERE lower(data->>'user_id') = ?::uuid::text RETURNING 1`, [userId]);
      return (rows as unknown[]).length;
    },

    /** The partner's sealed secrets; read under the partner's row lock when about to change them. */
    async webhookSecrets(trx: Knex.Transaction, clientId: string): Promise<WebhookSecrets> {
      const row = await trx("partners")
        .select("webhook_secret_enc", "webhook_secret_prev_enc", "webhook_secret_prev_until")
        .where({ client_id: clientId })
        .first();
      return {
        current: row?.webhook_secret_enc == null ? null : String(row.webhook_secret_enc),
        previous: row?.webhook_secret_prev_enc == null ? null : { enc: String(row.webhook_secret_prev_enc), until: new Date(row.webhook_secret_prev_until) },
      };
    },

    async setWebhook(trx: Knex.Transaction, clientId: string, url: string | null, secrets: WebhookSecrets): Promise<boolean> {
      const n = await trx("partners")
        .where({ client_id: clientId })
        .update({
          webhook_url: url,
          webhook_gone_at: null,
          webhook_generation: trx.raw("webhook_generation + 1"),
          webhook_secret_enc: secrets.current,
          webhook_secret_prev_enc: secrets.previous?.enc ?? null,
          webhook_secret_prev_until: secrets.previous?.until ?? null,
        });
      return Number(n) > 0;
    },
  };
}

export type OutboxStore = ReturnType<typeof createOutboxStore>;

/** A partner's delivery lane held by one worker (see claimLanes). */
export interface Lane {
  partnerId: string;
  token: string;
}

export type LeaseStep = { kind: "lost" } | { kind: "stop" } | { kind: "idle" } | { kind: "deliver"; delivery: DueDelivery };

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

/** The pruner's batch: rotated-out webhook secrets whose overlap ended before the cutoff are forgotten. */
export const PRUNE_WEBHOOK_PREVIOUS_SECRETS = {
  table: "partners",
  sql: `UPDATE partners SET webhook_secret_prev_enc = NULL, webhook_secret_prev_until = NULL WHERE ctid = ANY(ARRAY(
          SELECT ctid FROM partners WHERE webhook_secret_prev_until <= ? ORDER BY webhook_secret_prev_until LIMIT ? FOR UPDATE SKIP LOCKED)) RETURNING 1`,
} as const;

/** The pruner's batch: events written before the cutoff, whether delivered, failed or still pending. */
export const PRUNE_PARTNER_EVENTS = {
  table: "partner_events",
  sql: pruneBatchSql("partner_events", "created_at < ?", "created_at"),
} as const;
