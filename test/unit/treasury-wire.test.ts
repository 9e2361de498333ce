import { expect } from "chai";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { BatchSchema, ItemStatus } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { parseBatchBody, renderBatch } from "../../gateways/partner/treasury-wire.js";

const item = () => ({
  execution_id: "ex-1",
  payout_id: "po-1",
  recipient: { user_id: "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f" },
  amount_cents: 100,
  currency: "USD",
  reference: "invoice 1",
});

describe("treasury batch body (gateway)", () => {
  it("maps the HTTP batch body onto the RPC", () => {
    const r = parseBatchBody({ payer_entity_id: "p", items: [item()] });
    expect(r).to.deep.equal({
      ok: true,
      payerEntityId: "p",
      items: [{ executionId: "ex-1", payoutId: "po-1", recipientUserId: item().recipient.user_id, amountCents: 100n, currency: "USD", reference: "invoice 1" }],
    });
  });

  const cases: [string, unknown, string][] = [
    ["an array body", [], "body must be a JSON object"],
    ["an unknown top-level field", { payer_entity_id: "p", items: [], note: 1 }, "unknown field: note"],
    ["an unknown item field", { payer_entity_id: "p", items: [{ ...item(), payer: "x" }] }, "unknown field: items[0].payer"],
    [
      "an unknown recipient field",
      { payer_entity_id: "p", items: [{ ...item(), recipient: { user_id: "u", email: "e" } }] },
      "unknown field: items[0].recipient.email",
    ],
    ["a missing field", { payer_entity_id: "p", items: [{ ...item(), reference: undefined }] }, "items[0].reference is required"],
    ["a null field", { payer_entity_id: "p", items: [{ ...item(), reference: null }] }, "items[0].reference must be a string"],
    ["a missing items", { payer_entity_id: "p" }, "items is required"],
    [
      "a string amount",
      { payer_entity_id: "p", items: [{ ...item(), amount_cents: "100" }] },
      "items[0].amount_cents must be an integer from 1 to 9007199254740991",
    ],
    [
      "a fractional amount",
      { payer_entity_id: "p", items: [{ ...item(), amount_cents: 1.5 }] },
      "items[0].amount_cents must be an integer from 1 to 9007199254740991",
    ],
    [
      "an amount past 2^53",
      { payer_entity_id: "p", items: [{ ...item(), amount_cents: 2 ** 53 }] },
      "items[0].amount_cents must be an integer from 1 to 9007199254740991",
    ],
  ];
  for (const [name, body, message] of cases) {
    it(`refuses ${name}`, () => {
      expect(parseBatchBody(JSON.parse(JSON.stringify(body)))).to.deep.equal({ ok: false, message });
    });
  }

  it("renders a batch in a fixed key order", () => {
    const at = timestampFromDate(new Date("2030-01-02T03:04:05.678Z"));
    const b = create(BatchSchema, {
      batchId: "b",
      payerEntityId: "p",
      totalCents: 100n,
      createdAt: at,
      items: [{ executionId: "e", payoutId: "o", status: ItemStatus.ALREADY_EXECUTED, executedAt: at }],
    });
    expect(JSON.stringify(renderBatch(b))).to.equal(
      '{"batch_id":"b","payer_entity_id":"p","total_cents":100,"items":[{"execution_id":"e","payout_id":"o","status":"already_executed","executed_at":"2030-01-02T03:04:05.678Z"}],"created_at":"2030-01-02T03:04:05.678Z"}',
    );
  });
});
