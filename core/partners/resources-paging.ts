/** Paging of the partner resource feeds (transfers, events): signed cursors and watermarks. */

import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { AuditStore } from "../audit/store.js";
import { FEED_START, positionXid, type CursorCodec, type FeedPosition } from "../paging.js";

const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 100;

export type Page = { limit: number; cursor: string; since: string } | undefined;

/** What paging a feed needs (`reached`: the audit store's test of a position against the database's transaction ids). */
export interface PagingDeps {
  cursors: CursorCodec;
  audit: Pick<AuditStore, "reached">;
}

/**
 * Resolves paging input to a feed position. Cursors and watermarks are signed and bound to one partner's
 * view of one list: any other cursor (or one ahead of the feed) is invalid_cursor, any other since a bad
 * query parameter (invalid_cursor tells a client to restart from its since). No xid means xid 0.
 */
export async function position(deps: PagingDeps, page: Page, binding: string): Promise<{ after: FeedPosition; limit: number }> {
  const limit = !page || page.limit === 0 ? DEFAULT_LIMIT : page.limit;
  if (limit < 1 || limit > MAX_LIMIT) fail(Reason.INVALID_REQUEST, `limit must be 1 to ${MAX_LIMIT}`);
  if (page?.cursor && page.since) fail(Reason.INVALID_REQUEST, "send cursor or since, not both");
  const token = page?.cursor || page?.since;
  if (!token) return { after: FEED_START, limit };
  const kind = page?.cursor ? "c" : "w";
  const decoded = deps.cursors.decode(token);
  const xid = decoded ? positionXid(decoded.x) : undefined;
  if (
    !decoded ||
    xid === undefined ||
    decoded.k !== kind ||
    decoded.b !== binding ||
    typeof decoded.a !== "number" ||
    !Number.isSafeInteger(decoded.a) ||
    decoded.a < 0
  ) {
    if (kind === "c") fail(Reason.INVALID_CURSOR, "cursor is malformed or no longer valid");
    fail(Reason.INVALID_REQUEST, "since is not a watermark of this list");
  }
  const after = { xid, seq: decoded.a };
  // Signed, so only a database restore leaves one ahead: resuming there would skip every row until the feed caught up.
  if (!(await deps.audit.reached(after))) {
    if (kind === "c") fail(Reason.INVALID_CURSOR, "cursor is ahead of this list");
    fail(Reason.INVALID_REQUEST, "since is ahead of this list");
  }
  return { after, limit };
}

export function pageOut<T>(deps: PagingDeps, rows: { row: T; position: FeedPosition }[], limit: number, after: FeedPosition, binding: string) {
  const page = rows.slice(0, limit);
  const last = page.at(-1)?.position;
  const at = last ?? after;
  return {
    page: page.map((r) => r.row),
    nextCursor: rows.length > limit && last ? deps.cursors.encode({ k: "c", b: binding, a: last.seq, x: last.xid }) : "",
    watermark: deps.cursors.encode({ k: "w", b: binding, a: at.seq, x: at.xid }),
  };
}
