import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { AuditService, Outcome } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { CursorCodec } from "../paging.js";
import type { AuditRow, AuditStore } from "./store.js";

export interface AuditServiceDeps {
  store: AuditStore;
  cursors: CursorCodec;
  /** How often a tail looks for new records. */
  tailPollMs?: number;
}

const MAX_LIMIT = 500;

export function createAuditService(deps: AuditServiceDeps): ServiceImpl<typeof AuditService> {
  const pollMs = deps.tailPollMs ?? 250;

  function parseSince(since: string): number {
    if (since === "") return 0;
    if (!/^\d{1,15}$/.test(since)) fail(Reason.INVALID_CURSOR, "since must be a record_id watermark");
    return Number(since);
  }

  return {
    async listRecords(req) {
      const limit = req.limit === 0 ? 100 : req.limit;
      if (limit > MAX_LIMIT) fail(Reason.INVALID_REQUEST, `limit must be 1 to ${MAX_LIMIT}`);
      let afterSeq = parseSince(req.since);
      if (req.cursor) {
        const position = deps.cursors.decode(req.cursor);
        if (!position || typeof position.a !== "number") fail(Reason.INVALID_CURSOR, "cursor is malformed or no longer valid");
        afterSeq = position.a;
      }
      const rows = await deps.store.list({ afterSeq, limit: limit + 1, actor: req.actor, action: req.action, requestId: req.requestId });
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return {
        records: page.map(toProto),
        nextCursor: rows.length > limit && last ? deps.cursors.encode({ a: last.seq }) : "",
      };
    },

    async *tailRecords(req, ctx) {
      let afterSeq = req.since === "" ? await deps.store.maxSeq() : parseSince(req.since);
      while (!ctx.signal.aborted) {
        const rows = await deps.store.list({ afterSeq, limit: 100, actor: req.actor, action: req.action });
        for (const row of rows) {
          afterSeq = row.seq;
          yield { record: toProto(row) };
        }
        if (rows.length < 100) await sleep(pollMs, ctx.signal);
      }
    },
  };
}

function toProto(r: AuditRow) {
  return {
    recordId: String(r.seq),
    requestId: r.requestId,
    actor: r.actor,
    action: r.action,
    outcome: r.outcome === "success" ? Outcome.SUCCESS : Outcome.FAILURE,
    reason: r.reason,
    subject: r.subject,
    createdAt: timestampFromDate(r.createdAt),
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
