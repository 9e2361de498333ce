import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate, TimestampSchema } from "@bufbuild/protobuf/wkt";
import { BatchResultItemSchema, BatchSchema, ItemStatus } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { encodeBatch } from "../../../core/treasury/batch-encoding.js";

/**
 * The stored answer of a batch is written by a hand-made encoder (core/treasury/batch-encoding.ts):
 * its bytes must be exactly protobuf-es's, for every shape of batch, and it must not
 * survive a change of the messages it writes unnoticed.
 */
describe("the stored batch answer (encodeBatch)", () => {
  const same = (init: MessageInitShape<typeof BatchSchema>) => {
    const batch = create(BatchSchema, init);
    const ours = encodeBatch(batch);
    expect(Buffer.from(ours).equals(Buffer.from(toBinary(BatchSchema, batch)))).to.equal(true);
    expect(fromBinary(BatchSchema, ours)).to.deep.equal(batch);
  };
  const now = new Date("2026-11-23T10:11:12.345Z");

  it("writes the bytes toBinary writes: a large batch, executed and already executed items", () => {
    same({
      batchId: randomUUID(),
      payerEntityId: randomUUID(),
      totalCents: 123_456_789n,
      createdAt: timestampFromDate(now),
      items: Array.from({ length: 600 }, (_, i) => ({
        executionId: `ex-${i}-${randomUUID()}`,
        payoutId: `po.${i}:${"x".repeat(i % 128)}`,
        status: i % 7 === 0 ? ItemStatus.ALREADY_EXECUTED : ItemStatus.EXECUTED,
        executedAt: timestampFromDate(i % 7 === 0 ? new Date(now.getTime() - i * 86_400_123) : now),
      })),
    });
  });

  it("leaves out proto3 defaults as toBinary does: zero total, empty strings, zero status, whole seconds, absent times, no items", () => {
    same({ batchId: randomUUID(), payerEntityId: randomUUID(), totalCents: 0n, createdAt: timestampFromDate(new Date("2026-01-01T00:00:00Z")), items: [] });
    same({});
    same({ items: [{}, { executionId: "a" }, { status: ItemStatus.EXECUTED, executedAt: { seconds: 0n, nanos: 1 } }] });
    same({ totalCents: BigInt(Number.MAX_SAFE_INTEGER), createdAt: { seconds: 1n, nanos: 999_999_999 } });
  });

  it("counts characters beyond ASCII in bytes", () => {
    same({ batchId: "päyout—€😀", items: [{ executionId: "ü".repeat(200), payoutId: "😀".repeat(40) }] });
  });

  it("falls back to toBinary for what it does not write: negative times, unknown fields", () => {
    same({ createdAt: { seconds: -62_135_596_800n, nanos: 0 }, items: [{ executedAt: { seconds: -1n, nanos: 5 } }] });
    const withUnknown = create(BatchSchema, { batchId: "b" });
    withUnknown.$unknown = [{ no: 99, wireType: 0, data: new Uint8Array([1]) }];
    expect(Buffer.from(encodeBatch(withUnknown)).equals(Buffer.from(toBinary(BatchSchema, withUnknown)))).to.equal(true);
  });

  it("knows every field of the messages it writes (a new field must be added to the encoder)", () => {
    const fields = (schema: { fields: readonly { number: number; name: string }[] }) => schema.fields.map((f) => `${f.number} ${f.name}`);
    expect(fields(BatchSchema)).to.deep.equal(["1 batch_id", "2 payer_entity_id", "3 total_cents", "4 items", "5 created_at"]);
    expect(fields(BatchResultItemSchema)).to.deep.equal(["1 execution_id", "2 payout_id", "3 status", "4 executed_at"]);
    expect(fields(TimestampSchema)).to.deep.equal(["1 seconds", "2 nanos"]);
  });
});
