import { pool, take } from "./random.js";

/**
 * A UUID version 7 (RFC 9562 5.7): the current Unix time in milliseconds followed by 74
 * random bits. Ids made later sort later, so an index on them (the audit trail's request
 * ids, the grants' primary key) grows at its right edge instead of touching a random page
 * of a large index on every insert; a page touched for the first time since a checkpoint
 * costs a full 8 kB image in the WAL. 74 random bits keep ids unguessable and unique.
 * Request ids and grant ids are made here.
 *
 * Random bytes come from the pooled buffer of lib/random.ts, as node's randomUUID does;
 * hex is written from a table.
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
