import { expect } from "chai";
import { canonicalBatchHash, validateBatch, type RawBatch } from "../../core/treasury/batch-request.js";
import { exceededLimit, utcDay } from "../../core/treasury/policy.js";
import type { TreasuryRecord } from "../../core/treasury/records.js";

const user = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f";
const payer = "0e9d8c7b-6a5f-4e3d-9c2b-1a0f9e8d7c6b";

function raw(): RawBatch {
  return {
    idempotencyKey: "key-1",
    payerEntityId: payer,
    items: [
      { executionId: "ex-1", payoutId: "po-1", recipientUserId: user, amountCents: 100n, currency: "USD", reference: "a" },
      { executionId: "ex-2", payoutId: "po-2", recipientUserId: user, amountCents: 200n, currency: "USD", reference: "b" },
    ],
  };
}

describe("treasury batch request", () => {
  it("hashes the canonical batch: same content same hash, item order and every field count", () => {
    const v = validateBatch(raw());
    if (!v.ok) throw new Error(v.message);
    const base = canonicalBatchHash(v.batch);
    expect(canonicalBatchHash({ ...v.batch })).to.equal(base);
    expect(canonicalBatchHash({ ...v.batch, items: [...v.batch.items].reverse() })).to.not.equal(base);
    for (const field of ["executionId", "payoutId", "recipientUserId", "currency", "reference"] as const) {
      const items = v.batch.items.map((i, n) => (n === 0 ? { ...i, [field]: `${i[field]}x` } : i));
      expect(canonicalBatchHash({ ...v.batch, items }), field).to.not.equal(base);
    }
    expect(canonicalBatchHash({ ...v.batch, items: [{ ...v.batch.items[0]!, amountCents: 101 }, v.batch.items[1]!] })).to.not.equal(base);
    expect(canonicalBatchHash({ ...v.batch, payerEntityId: user })).to.not.equal(base);
  });

  it("the idempotency key is not part of the request identity", () => {
    const a = validateBatch(raw());
    const b = validateBatch({ ...raw(), idempotencyKey: "other" });
    if (!a.ok || !b.ok) throw new Error("invalid");
    expect(canonicalBatchHash(a.batch)).to.equal(canonicalBatchHash(b.batch));
  });

  it("upper-case UUIDs are the same request as lower-case ones", () => {
    const a = validateBatch(raw());
    const upper = raw();
    upper.payerEntityId = payer.toUpperCase();
    upper.items[0]!.recipientUserId = user.toUpperCase();
    const b = validateBatch(upper);
    if (!a.ok || !b.ok) throw new Error("invalid");
    expect(canonicalBatchHash(b.batch)).to.equal(canonicalBatchHash(a.batch));
  });

  it("refuses a total above 2^53-1 although every item is within range", () => {
    const r = raw();
    r.items[0]!.amountCents = BigInt(Number.MAX_SAFE_INTEGER);
    const v = validateBatch(r);
    expect(v.ok).to.equal(false);
  });

  it("messages name the field, never a value", () => {
    const r = raw();
    r.items[1]!.reference = "x".repeat(141);
    const v = validateBatch(r);
    expect(v).to.deep.equal({ ok: false, message: "items[1].reference must be 1 to 140 characters without control characters" });
  });

  it("refuses C0, DEL and C1 control characters in a reference (a terminal's CSI is U+009B)", () => {
    for (const c of ["\u0007", "\u007f", "\u0085", "\u009b"]) {
      const r = raw();
      r.items[0]!.reference = `pay${c}31m`;
      expect(validateBatch(r), JSON.stringify(c)).to.deep.equal({
        ok: false,
        message: "items[0].reference must be 1 to 140 characters without control characters",
      });
    }
    const r = raw();
    r.items[0]!.reference = "Café ☕ invoice №7";
    expect(validateBatch(r).ok).to.equal(true);
  });
});

describe("treasury limits", () => {
  const t = (over: Partial<TreasuryRecord> = {}): TreasuryRecord => ({
    partnerId: "p",
    payerEntityId: payer,
    currency: "USD",
    status: "active",
    balanceCents: 1_000_000,
    capPerItemCents: null,
    capPerDayCents: null,
    capLifetimeCents: null,
    stepUpAmountCents: null,
    spentLifetimeCents: 0,
    spentDay: null,
    spentDayCents: 0,
    ...over,
  });

  it("checks per_item_cap, per_day_cap, lifetime_cap, step_up_amount in that order", () => {
    const all = t({ capPerItemCents: 10, capPerDayCents: 10, capLifetimeCents: 10, stepUpAmountCents: 10 });
    expect(exceededLimit(all, [11], "2030-01-01")).to.equal("per_item_cap");
    expect(exceededLimit({ ...all, capPerItemCents: null }, [11], "2030-01-01")).to.equal("per_day_cap");
    expect(exceededLimit({ ...all, capPerItemCents: null, capPerDayCents: null }, [11], "2030-01-01")).to.equal("lifetime_cap");
    expect(exceededLimit({ ...all, capPerItemCents: null, capPerDayCents: null, capLifetimeCents: null }, [11], "2030-01-01")).to.equal("step_up_amount");
    expect(exceededLimit(all, [10], "2030-01-01")).to.equal(undefined);
  });

  it("counts today's spending only on the same UTC day", () => {
    const spent = t({ capPerDayCents: 100, spentDay: "2030-01-01", spentDayCents: 90 });
    expect(exceededLimit(spent, [11], "2030-01-01")).to.equal("per_day_cap");
    expect(exceededLimit(spent, [11], "2030-01-02")).to.equal(undefined);
    expect(utcDay(new Date("2030-01-01T23:59:59.999-01:00"))).to.equal("2030-01-02");
  });

  it("a batch with nothing new passes every limit", () => {
    expect(exceededLimit(t({ capLifetimeCents: 0, spentLifetimeCents: 5 }), [], "2030-01-01")).to.equal(undefined);
  });
});
