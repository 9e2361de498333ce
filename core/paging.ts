import { randomBytes } from "node:crypto";
import { firstWrittenValue } from "./db/instance-values.js";
import type { Db } from "./db/knex.js";
import { constantTimeEqual, hmacSha256 } from "../lib/crypto.js";

/** Server-signed opaque cursors: tampering or a cursor from another server fails to decode. */
export interface CursorCodec {
  encode(position: Record<string, string | number>): string;
  /** undefined when malformed or not signed by this deployment. */
  decode(cursor: string): Record<string, string | number> | undefined;
}

export function createCursorCodec(key: Buffer): CursorCodec {
  const mac = (body: string) => hmacSha256(key, body, "base64url").slice(0, 22);
  return {
    encode(position) {
      const body = Buffer.from(JSON.stringify(position)).toString("base64url");
      return `${body}.${mac(body)}`;
    },
    decode(cursor) {
      const [body, sig, ...rest] = cursor.split(".");
      if (!body || !sig || rest.length > 0 || !constantTimeEqual(sig, mac(body))) return undefined;
      try {
        const value: unknown = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
        return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, string | number>) : undefined;
      } catch {
        return undefined;
      }
    },
  };
}

/** A random per-deployment secret kept in the database, so every replica shares it. */
export function loadInstanceSecret(db: Db, name: string): Promise<Buffer> {
  return firstWrittenValue(db, name, randomBytes(32));
}

/**
 * A position in a change feed, ordered by (writing transaction id, seq) and read only below the
 * oldest running transaction, so resuming readers see each committed row exactly once.
 * docs/architecture.md ("Change feeds") has the argument.
 */
export interface FeedPosition {
  /** Decimal xid8 of the writing transaction. */
  xid: string;
  seq: number;
}

export const FEED_START: FeedPosition = { xid: "0", seq: 0 };

/** Strictly after a position; binds [xid, seq]. Pair with ORDER BY xid, seq. */
export const FEED_AFTER_SQL = `(xid, seq) > (?::xid8, ?::bigint)`;
/** Selected with each row: its xid as text and whether it is below the horizon. */
export const FEED_COLUMNS_SQL = `xid::text AS feed_xid, xid < pg_snapshot_xmin(pg_current_snapshot()) AS feed_settled`;
/** The horizon itself: every row committed from here on sorts at or after (xid, 0). */
export const FEED_HORIZON_SQL = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xid`;

const MAX_XID = (1n << 63n) - 1n;

/** "<xid>.<seq>": the watermark text of a position. */
export function formatWatermark(p: FeedPosition): string {
  return `${p.xid}.${p.seq}`;
}

/** Parses "<xid>.<seq>"; undefined when it is not one. */
export function parseWatermark(text: string): FeedPosition | undefined {
  const m = /^(\d{1,19})\.(\d{1,15})$/.exec(text);
  if (!m) return undefined;
  const xid = BigInt(m[1]!);
  if (xid > MAX_XID) return undefined;
  return { xid: xid.toString(), seq: Number(m[2]) };
}

/** The xid of a signed cursor/watermark body: absent in those issued before 0014 (xid 0). */
export function positionXid(value: unknown): string | undefined {
  if (value === undefined) return "0";
  if (typeof value !== "string" || !/^\d{1,19}$/.test(value) || BigInt(value) > MAX_XID) return undefined;
  return BigInt(value).toString();
}

/** A feed row as read: the caller's row plus its position and whether it is settled. */
export interface FeedRead<T> {
  row: T;
  position: FeedPosition;
  settled: boolean;
}

export function toFeedRead<T>(r: Record<string, unknown>, row: T & { seq: number }): FeedRead<T> {
  return { row, position: { xid: String(r.feed_xid), seq: row.seq }, settled: r.feed_settled === true };
}

/** Re-reads while settling: 10, 30 then 60 ms, about 0.1 s in all. */
const SETTLE_DELAYS_MS = [10, 30, 60];

/**
 * Returns a feed page's settled prefix, re-reading briefly while an open transaction holds rows back
 * so a write committed just before the request normally shows at once. Polling tails pass settle: false.
 */
export async function readSettled<T>(read: () => Promise<FeedRead<T>[]>, settle = true): Promise<{ row: T; position: FeedPosition }[]> {
  for (let attempt = 0; ; attempt++) {
    const rows = await read();
    const held = rows.findIndex((r) => !r.settled);
    if (held < 0) return rows;
    if (!settle || attempt >= SETTLE_DELAYS_MS.length) return rows.slice(0, held);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_DELAYS_MS[attempt]));
  }
}
