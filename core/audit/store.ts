import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { FEED_AFTER_SQL, FEED_COLUMNS_SQL, FEED_HORIZON_SQL, readSettled, toFeedRead, type FeedPosition } from "../paging.js";
import { auditWriteFailures } from "../observability/metrics.js";

export interface AuditEntry {
  requestId: string;
  actor: string;
  action: string;
  outcome: "success" | "failure";
  reason?: string;
  subject?: string;
  /** The client's address a gateway vouched for on this call ("" when none did). */
  clientAddress?: string;
  at: Date;
}

export interface AuditRow extends Required<Omit<AuditEntry, "at" | "clientAddress">> {
  seq: number;
  createdAt: Date;
}

export interface AuditFilter {
  /** Strictly after this feed position (core/paging.ts). */
  after: FeedPosition;
  limit: number;
  actor?: string;
  action?: string;
  requestId?: string;
}

export interface AuditStoreOptions {
  /**
   * Fault-injection seam for tests only: when it returns an error, append throws it
   * instead of writing (audit_unavailable cannot be caused for real otherwise); the store passes the entry.
   */
  appendFault?: (entry?: AuditEntry) => Error | undefined;
}

/** The audit row's columns, in the order AUDIT_INSERT_SQL's SELECT gives them. */
const AUDIT_COLUMNS = "request_id, actor, action, outcome, reason, subject, client_address, created_at";

/**
 * Appends the rows `selectSql` yields (AUDIT_COLUMNS, in order) inside another room's statement,
 * so a call's audit row commits with the very statement that lets the call answer.
 */
export const AUDIT_INSERT_SQL = (selectSql: string) => `INSERT INTO audit_records (${AUDIT_COLUMNS}) ${selectSql}`;

/** The append-only audit trail. */
export function createAuditStore(db: Db, options: AuditStoreOptions = {}) {
  let horizon = 0n;
  return {
    /** Writes one record; pass the transaction of the change it records. */
    async append(trx: Knex | Knex.Transaction, entry: AuditEntry): Promise<number> {
      try {
        const fault = options.appendFault?.(entry);
        if (fault) throw fault;
        const { rows } = await trx.raw(`INSERT INTO audit_records (${AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`, [
          entry.requestId,
          entry.actor,
          entry.action,
          entry.outcome,
          entry.reason ?? "",
          entry.subject ?? "",
          entry.clientAddress ?? "",
          entry.at,
        ]);
        return Number((rows as { seq: number }[])[0]!.seq);
      } catch (err) {
        auditWriteFailures.inc();
        throw err;
      }
    },

    /**
     * The settled records strictly after `filter.after`, in feed order (xid, seq), each
     * with its position; `settle: false` does not wait for held-back rows.
     */
    async list(filter: AuditFilter, settle = true): Promise<{ row: AuditRow; position: FeedPosition }[]> {
      return readSettled(async () => {
        const q = db("audit_records")
          .select("*", db.raw(FEED_COLUMNS_SQL))
          .whereRaw(FEED_AFTER_SQL, [filter.after.xid, filter.after.seq])
          .orderBy([{ column: "xid" }, { column: "seq" }])
          .limit(filter.limit);
        if (filter.actor) q.andWhere("actor", filter.actor);
        if (filter.action) q.andWhere("action", filter.action);
        if (filter.requestId) q.andWhere("request_id", filter.requestId);
        const rows = (await q) as Record<string, unknown>[];
        return rows.map((r) => toFeedRead(r, toAuditRow(r)));
      }, settle);
    },

    /** Where "from now" starts: every record that commits later sorts after it. */
    async horizon(): Promise<FeedPosition> {
      const { rows } = await db.raw(FEED_HORIZON_SQL);
      return { xid: String((rows as { xid: string }[])[0]!.xid), seq: 0 };
    },

    /** Whether a position is one this feed can have given out: its transaction id has been assigned. */
    async reached(position: FeedPosition): Promise<boolean> {
      // Transaction ids only grow: at or below the highest horizon seen, no query is needed.
      const xid = BigInt(position.xid);
      if (xid <= horizon) return true;
      const { rows } = await db.raw(`SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xmax`);
      const xmax = BigInt((rows as { xmax: string }[])[0]!.xmax);
      if (xmax > horizon) horizon = xmax;
      return xid <= xmax;
    },

    /** The feed position of a visible record (of `actor`, when given), by record_id. */
    async positionOf(seq: number, actor?: string): Promise<FeedPosition | undefined> {
      const q = db("audit_records").select(db.raw("xid::text AS xid")).where("seq", seq);
      if (actor !== undefined) q.andWhere("actor", actor);
      const r = ((await q) as { xid: string }[])[0];
      return r ? { xid: r.xid, seq } : undefined;
    },
  };
}

export type AuditStore = ReturnType<typeof createAuditStore>;

function toAuditRow(r: Record<string, unknown>): AuditRow {
  return {
    seq: Number(r.seq),
    requestId: String(r.request_id),
    actor: String(r.actor),
    action: String(r.action),
    outcome: r.outcome as "success" | "failure",
    reason: String(r.reason),
    subject: String(r.subject),
    createdAt: r.created_at instanceof Date ? r.created_at : new Date(String(r.created_at)),
  };
}
