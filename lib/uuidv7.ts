import { pool, take } from "./random.js";

/**
 * A UUID version 7 (RFC 9562): time-ordered so indexes on request and grant ids grow at their
 * right edge instead of dirtying random pages (and WAL full-page images); 74 random bits, from the
 * pooled buffer of lib/random.ts, keep ids unguessable.
 */
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

let prefixMs = -1;
let prefix = "";

export function uuidv7(now = Date.now()): string {
  const r = take(10);
  if (now !== prefixMs) {
    // 48-bit big-endian milliseconds as 12 hex digits, made once per millisecond.
    const ms = Math.max(0, Math.floor(now)).toString(16).padStart(12, "0").slice(-12);
    prefix = `${ms.slice(0, 8)}-${ms.slice(8, 12)}-7`;
    prefixMs = now;
  }
  const p = pool;
  return (
    prefix +
    HEX[p[r]! & 0x0f]![1]! +
    HEX[p[r + 1]!]! +
    "-" +
    HEX[(p[r + 2]! & 0x3f) | 0x80]! +
    HEX[p[r + 3]!]! +
    "-" +
    HEX[p[r + 4]!]! +
    HEX[p[r + 5]!]! +
    HEX[p[r + 6]!]! +
    HEX[p[r + 7]!]! +
    HEX[p[r + 8]!]! +
    HEX[p[r + 9]!]!
  );
}
