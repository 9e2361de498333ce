import { toBinary } from "@bufbuild/protobuf";
import { BatchSchema, type Batch } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";

/**
 * The stored batch answer, byte-identical to `toBinary(BatchSchema, batch)` but without reflection,
 * which is slow on large batches while the treasury lock is held; uncovered values fall back to
 * toBinary, and batch-encoding.test.ts fails when the message gains a field this writer lacks.
 */
export function encodeBatch(batch: Batch): Uint8Array {
  if (!plain(batch)) return toBinary(BatchSchema, batch);
  const items = batch.items;
  const itemSizes = new Array<number>(items.length);
  let size = stringSize(batch.batchId) + stringSize(batch.payerEntityId) + uintSize(Number(batch.totalCents));
  for (let k = 0; k < items.length; k++) {
    const i = items[k]!;
    const s = stringSize(i.executionId) + stringSize(i.payoutId) + uintSize(i.status) + timestampSize(i.executedAt);
    itemSizes[k] = s;
    size += 1 + varintSize(s) + s;
  }
  size += timestampSize(batch.createdAt);

  const buf = Buffer.allocUnsafe(size);
  let p = 0;
  const varint = (v: number) => {
    while (v >= 0x80) {
      buf[p++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    buf[p++] = v;
  };
  const string = (tag: number, s: string) => {
    if (s === "") return;
    buf[p++] = tag;
    varint(Buffer.byteLength(s));
    p += buf.write(s, p, "utf8");
  };
  const uint = (tag: number, v: number) => {
    if (v === 0) return;
    buf[p++] = tag;
    varint(v);
  };
  const timestamp = (tag: number, t: Batch["createdAt"]) => {
    if (!t) return;
    buf[p++] = tag;
    varint(timestampBody(t));
    uint(0x08, Number(t.seconds));
    uint(0x10, t.nanos);
  };

  string(0x0a, batch.batchId);
  string(0x12, batch.payerEntityId);
  uint(0x18, Number(batch.totalCents));
  for (let k = 0; k < items.length; k++) {
    const i = items[k]!;
    buf[p++] = 0x22;
    varint(itemSizes[k]!);
    string(0x0a, i.executionId);
    string(0x12, i.payoutId);
    uint(0x18, i.status);
    timestamp(0x22, i.executedAt);
  }
  timestamp(0x2a, batch.createdAt);
  if (p !== size) throw new Error(`encodeBatch wrote ${p} bytes of ${size}`);
  return buf;
}

type Timestamp = NonNullable<Batch["createdAt"]>;

const safe = (v: bigint | number) => v >= 0 && v <= Number.MAX_SAFE_INTEGER;
const noUnknown = (m: { $unknown?: unknown[] }) => m.$unknown === undefined || m.$unknown.length === 0;
const plainTimestamp = (t: Timestamp | undefined) => t === undefined || (safe(t.seconds) && safe(t.nanos) && noUnknown(t));

/** Every integer non-negative and safe, no unknown fields: what this writer covers. */
function plain(b: Batch): boolean {
  if (!safe(b.totalCents) || !plainTimestamp(b.createdAt) || !noUnknown(b)) return false;
  for (const i of b.items) if (!safe(i.status) || !plainTimestamp(i.executedAt) || !noUnknown(i)) return false;
  return true;
}

function varintSize(v: number): number {
  let n = 1;
  while (v >= 0x80) {
    v = Math.floor(v / 0x80);
    n++;
  }
  return n;
}

/** A one-byte tag and the value, or nothing for the proto3 default. */
const uintSize = (v: number) => (v === 0 ? 0 : 1 + varintSize(v));

function stringSize(s: string): number {
  if (s === "") return 0;
  const n = Buffer.byteLength(s);
  return 1 + varintSize(n) + n;
}

const timestampBody = (t: Timestamp) => uintSize(Number(t.seconds)) + uintSize(t.nanos);

function timestampSize(t: Timestamp | undefined): number {
  if (!t) return 0;
  const body = timestampBody(t);
  return 1 + varintSize(body) + body;
}
