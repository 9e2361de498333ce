import type { MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError, type HandlerContext } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  type ListRecordsRequest,
  type ListRecordsResponseSchema,
  Outcome,
  type TailRecordsRequest,
  type TailRecordsResponseSchema,
} from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { FEED_START, formatWatermark, parseWatermark, positionXid, type CursorCodec, type FeedPosition } from "../paging.js";
import type { AuditRow, AuditStore } from "./store.js";

export interface ListRecordsDeps {
  store: AuditStore;
  cursors: CursorCodec;
}

export interface TailRecordsDeps {
  store: AuditStore;
  /** How often a tail looks for new records. */
  pollMs: number;
}

const MAX_LIMIT = 500;

/** AuditService.ListRecords: one page of the audit feed, filtered, with its cursor and watermark. */
export async function listRecords(deps: ListRecordsDeps, req: ListRecordsRequest): Promise<MessageInitShape<typeof ListRecordsResponseSchema>> {
  const limit = req.limit === 0 ? 100 : req.limit;
  if (limit > MAX_LIMIT) fail(Reason.INVALID_REQUEST, `limit must be 1 to ${MAX_LIMIT}`);
  if (req.cursor && req.since) fail(Reason.INVALID_REQUEST, "send cursor or since, not both");
  let after = await auditSince(deps.store, req.since);
  if (req.cursor) after = auditCursor(deps.cursors, req.cursor, {});
  const rows = await deps.store.list({ after, limit: limit + 1, actor: req.actor, action: req.action, requestId: req.requestId });
  const page = rows.slice(0, limit);
  const last = page.at(-1)?.position;
  return {
    records: page.map((r) => toProto(r.row)),
    nextCursor: rows.length > limit && last ? deps.cursors.encode({ a: last.seq, x: last.xid }) : "",
    watermark: formatWatermark(last ?? after),
  };
}

/** AuditService.TailRecords: the feed from `since` (or its horizon), then new records as they come. */
export async function* tailRecords(
  deps: TailRecordsDeps,
  req: TailRecordsRequest,
  ctx: HandlerContext,
): AsyncGenerator<MessageInitShape<typeof TailRecordsResponseSchema>> {
  let after = req.since === "" ? await deps.store.horizon() : await auditSince(deps.store, req.since);
  while (!ctx.signal.aborted) {
    // No settling wait: the poll below is the wait.
    const rows = await deps.store.list({ after, limit: 100, actor: req.actor, action: req.action }, false);
    for (const { row, position } of rows) {
      after = position;
      yield { record: toProto(row), watermark: formatWatermark(position) };
    }
    if (rows.length < 100) await sleep(deps.pollMs, ctx.signal);
  }
  // Cut by core shutting down (or a deadline): say so, rather than end as if the feed had.
  if (ctx.signal.reason instanceof ConnectError) throw ctx.signal.reason;
}

/**
 * Resolves an audit feed's `since` (empty, a watermark or a bare record_id); anything else (a
 * watermark ahead of the feed, a record_id naming no record visible to `actor`) is invalid_request.
 */
export async function auditSince(store: AuditStore, since: string, actor?: string): Promise<FeedPosition> {
  if (since === "") return FEED_START;
  const watermark = parseWatermark(since);
  // One from the future would silently skip every record until the feed caught up with it.
  if (watermark && (await store.reached(watermark))) return watermark;
  if (/^\d{1,15}$/.test(since)) {
    const seq = Number(since);
    if (seq === 0) return FEED_START;
    const position = await store.positionOf(seq, actor);
    if (position) return position;
  }
  return fail(Reason.INVALID_REQUEST, "since must be a watermark or record_id of this feed");
}

/**
 * Decodes an audit paging cursor `{a: seq, x: xid, ...binding}`; every `binding` entry
 * must match. Cursors issued before the feed horizon have no `x` (xid 0).
 */
export function auditCursor(cursors: CursorCodec, cursor: string, binding: Record<string, string>): FeedPosition {
  const position = cursors.decode(cursor);
  const xid = position ? positionXid(position.x) : undefined;
  const bound = position !== undefined && Object.entries(binding).every(([k, v]) => position[k] === v);
  if (!position || !bound || xid === undefined || typeof position.a !== "number" || !Number.isSafeInteger(position.a) || position.a < 0) {
    return fail(Reason.INVALID_CURSOR, "cursor is malformed or no longer valid");
  }
  return { xid, seq: position.a };
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
