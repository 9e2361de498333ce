import type { Knex } from "knex";
import type { Db } from "../db/knex.js";

export interface AuditEntry {
  requestId: string;
  actor: string;
  action: string;
  outcome: "success" | "failure";
  reason?: string;
  subject?: string;
  at: Date;
}

export interface AuditRow extends Required<Omit<AuditEntry, "at">> {
  seq: number;
  createdAt: Date;
}

export interface AuditFilter {
  afterSeq: number;
  limit: number;
  actor?: string;
  action?: string;
  requestId?: string;
}

export interface AuditStoreOptions {
  /**
   * Fault-injection seam for tests only: when it returns an error, append throws it
   * instead of writing (spec 7.3 audit_unavailable cannot be caused for real otherwise).
   */
  appendFault?: () => Error | undefined;
}

/** The append-only audit trail. */
export function createAuditStore(db: Db, options: AuditStoreOptions = {}) {
  return {
    /** Writes one record; pass the transaction of the change it records. */
    async append(trx: Knex | Knex.Transaction, entry: AuditEntry): Promise<number> {
      const fault = options.appendFault?.();
      if (fault) throw fault;
      const { rows } = await trx.raw(
        `INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
        [entry.requestId, entry.actor, entry.action, entry.outcome, entry.reason ?? "", entry.subject ?? "", entry.at],
      );
      return Number((rows as { seq: number }[])[0]!.seq);
    },

    async list(filter: AuditFilter): Promise<AuditRow[]> {
      const q = db("audit_records").where("seq", ">", filter.afterSeq).orderBy("seq").limit(filter.limit);
      if (filter.actor) q.andWhere("actor", filter.actor);
      if (filter.action) q.andWhere("action", filter.action);
      if (filter.requestId) q.andWhere("request_id", filter.requestId);
      const rows = (await q) as Record<string, unknown>[];
      return rows.map(toAuditRow);
    },

    async maxSeq(): Promise<number> {
      const { rows } = await db.raw(`SELECT coalesce(max(seq), 0)::int8 AS seq FROM audit_records`);
      return Number((rows as { seq: number }[])[0]!.seq);
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
