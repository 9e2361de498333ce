import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { toBinary } from "@bufbuild/protobuf";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { ExecuteBatchResponseSchema, ItemStatus, TreasuryStatus } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, grantConsent, revokeConsent, withToken } from "../../support/treasury.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { treasuryKit } from "../../support/treasury.js";

describe("TreasuryService.ExecuteBatch", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const { treasury, balanceOf, executionCount, auditOf, setup } = treasuryKit(() => stack);

  it("pays a batch all at once and reports each item", async () => {
    const { partner, payer, user } = await setup({ balanceCents: 10_000n });
    const req = batchRequest(partner, payer, [
      { recipientUserId: user, amountCents: 1_000n },
      { recipientUserId: user, amountCents: 2_500n },
    ]);
    const res = await treasury().executeBatch(req);
    expect(res.replayed).to.equal(false);
    expect(res.batch!.totalCents).to.equal(3_500n);
    expect(res.batch!.payerEntityId).to.equal(payer);
    expect(res.batch!.items.map((i) => [i.executionId, i.payoutId, i.status])).to.deep.equal(
      req.items!.map((i) => [i.executionId, i.payoutId, ItemStatus.EXECUTED]),
    );
    expect(await balanceOf(partner)).to.equal(6_500);
    const payout = await treasury().getPayout({ accessToken: partner.token, userId: user, payoutId: req.items![1]!.payoutId! });
    expect(payout.payout).to.include({
      executionId: req.items![1]!.executionId,
      batchId: res.batch!.batchId,
      userId: user,
      amountCents: 2_500n,
      currency: "USD",
      status: "executed",
    });
    const audit = await auditOf(partner);
    expect(audit.map((r) => [r.reason, r.subject])).to.deep.equal([["", res.batch!.batchId]]);
  });

  describe("check order", () => {
    it("reports the earliest failing check, and after each fix the same ids succeed", async () => {
      const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
      const user = (await stack.admin.partners.createUser({ email: `r-${randomUUID()}@example.test` })).userId;
      const payer = randomUUID();
      // Everything wrong at once: no treasury, and (once bound) inactive, wrong payer, a
      // reused execution id, no consent, over a cap and over the balance.
      const good = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 5_000n }]);
      const bad = { ...good, items: [{ ...good.items![0]!, amountCents: 0n }] };

      await expectRefused(treasury().executeBatch(bad), Reason.INVALID_REQUEST);
      await expectRefused(treasury().executeBatch(good), Reason.TREASURY_NOT_CONFIGURED);

      await bindTreasury(stack.admin, partner, { payerEntityId: randomUUID(), balanceCents: 1_000n, capPerItemCents: 4_000n });
      await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.SUSPENDED });
      await expectRefused(treasury().executeBatch(good), Reason.TREASURY_INACTIVE);

      await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.ACTIVE });
      await expectRefused(treasury().executeBatch(good), Reason.PAYER_NOT_ALLOWED);

      await bindTreasury(stack.admin, partner, { payerEntityId: payer, balanceCents: 1_000n, capPerItemCents: 4_000n });
      // An earlier payout under this execution id with another amount: conflict first.
      await grantConsent(stack.admin, partner, user);
      const earlier = { ...good, idempotencyKey: `k-${randomUUID()}`, items: [{ ...good.items![0]!, payoutId: `po-${randomUUID()}`, amountCents: 10n }] };
      await treasury().executeBatch(earlier);
      await revokeConsent(stack.admin, partner, user);
      await expectRefused(treasury().executeBatch(good), Reason.EXECUTION_CONFLICT);

      const fresh = { ...good, items: [{ ...good.items![0]!, executionId: `ex-${randomUUID()}` }] };
      await expectRefused(treasury().executeBatch(fresh), Reason.GRANT_REQUIRED);

      await grantConsent(stack.admin, partner, user);
      const policy = await refusalOf(treasury().executeBatch(fresh));
      expect(policy).to.include({ reason: Reason.POLICY_DENIED, limitName: "per_item_cap" });

      await bindTreasury(stack.admin, partner, { payerEntityId: payer, balanceCents: 990n });
      await expectRefused(treasury().executeBatch(fresh), Reason.INSUFFICIENT_FUNDS);

      const before = await executionCount(partner);
      expect(before).to.equal(1);
      await stack.admin.treasury.fundTreasury({ clientId: partner.clientId, amountCents: 4_010n });
      const ok = await treasury().executeBatch(fresh);
      expect(ok.batch!.items[0]!.status).to.equal(ItemStatus.EXECUTED);
      expect(await balanceOf(partner)).to.equal(0);

      const reasons = (await auditOf(partner)).map((r) => r.reason);
      expect(reasons).to.deep.equal([
        "invalid_request",
        "treasury_not_configured",
        "treasury_inactive",
        "payer_not_allowed",
        "",
        "execution_conflict",
        "grant_required",
        "policy_denied",
        "insufficient_funds",
        "",
      ]);
    });

    it("answers a replay or a conflict for a used key before looking at the treasury", async () => {
      const { partner, payer, user } = await setup();
      const req = batchRequest(partner, payer, [{ recipientUserId: user }]);
      const first = await treasury().executeBatch(req);
      await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.DISABLED });
      const again = await treasury().executeBatch(req);
      expect(again.replayed).to.equal(true);
      expect(again.batch!.batchId).to.equal(first.batch!.batchId);
      const changed = { ...req, items: [{ ...req.items![0]!, reference: "other" }] };
      await expectRefused(treasury().executeBatch(changed), Reason.IDEMPOTENCY_CONFLICT);
      // Body validation still comes first.
      const invalid = { ...req, payerEntityId: "not-a-uuid" };
      await expectRefused(treasury().executeBatch(invalid), Reason.INVALID_REQUEST);
    });
  });

  describe("body validation", () => {
    const cases: [string, (r: ReturnType<typeof batchRequest>) => void][] = [
      ["an empty Idempotency-Key", (r) => (r.idempotencyKey = "")],
      ["an Idempotency-Key over 255 characters", (r) => (r.idempotencyKey = "k".repeat(256))],
      ["a payer that is not a UUID", (r) => (r.payerEntityId = "payer")],
      ["no items", (r) => (r.items = [])],
      ["a zero amount", (r) => (r.items![0]!.amountCents = 0n)],
      ["an amount above 2^53-1", (r) => (r.items![0]!.amountCents = 2n ** 53n)],
      ["a lower-case currency", (r) => (r.items![0]!.currency = "usd")],
      ["an empty reference", (r) => (r.items![0]!.reference = "")],
      ["a recipient that is not a UUID", (r) => (r.items![0]!.recipientUserId = "u1")],
      ["an execution id with a slash", (r) => (r.items![0]!.executionId = "a/b")],
      ["a repeated execution id", (r) => (r.items![1]!.executionId = r.items![0]!.executionId)],
      ["a repeated payout id", (r) => (r.items![1]!.payoutId = r.items![0]!.payoutId)],
    ];
    for (const [name, mutate] of cases) {
      it(`refuses ${name} with invalid_request and executes nothing`, async () => {
        const { partner, payer, user } = await setup();
        const req = batchRequest(partner, payer, [{ recipientUserId: user }, { recipientUserId: user }]);
        mutate(req);
        const r = await refusalOf(treasury().executeBatch(req));
        expect(r).to.include({ reason: Reason.INVALID_REQUEST, code: Code.InvalidArgument });
        expect(await executionCount(partner)).to.equal(0);
      });
    }

    it("accepts a 255-character Idempotency-Key", async () => {
      const { partner, payer, user } = await setup();
      const res = await treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user }], "k".repeat(255)));
      expect(res.replayed).to.equal(false);
    });

    it("refuses items in a currency other than the treasury's", async () => {
      const { partner, payer, user } = await setup();
      const r = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, currency: "EUR" }])));
      expect(r.reason).to.equal(Reason.INVALID_REQUEST);
      expect(r.message).to.contain("items[0].currency");
    });
  });

  describe("idempotency", () => {
    it("replays the original answer exactly and debits once", async () => {
      const { partner, payer, user } = await setup({ balanceCents: 1_000n });
      const req = batchRequest(partner, payer, [
        { recipientUserId: user, amountCents: 300n },
        { recipientUserId: user, amountCents: 200n },
      ]);
      const first = await treasury().executeBatch(req);
      stack.clock.advance(60_000);
      const again = await treasury().executeBatch(req);
      expect(again.replayed).to.equal(true);
      expect(toBinary(ExecuteBatchResponseSchema, { ...again, replayed: false })).to.deep.equal(toBinary(ExecuteBatchResponseSchema, first));
      expect(await balanceOf(partner)).to.equal(500);
      expect(await executionCount(partner)).to.equal(2);
    });

    it("treats a different item order under the same key as a conflict", async () => {
      const { partner, payer, user } = await setup();
      const req = batchRequest(partner, payer, [{ recipientUserId: user }, { recipientUserId: user }]);
      await treasury().executeBatch(req);
      const reordered = { ...req, items: [req.items![1]!, req.items![0]!] };
      const r = await refusalOf(treasury().executeBatch(reordered));
      expect(r).to.include({ reason: Reason.IDEMPOTENCY_CONFLICT, code: Code.AlreadyExists });
    });

    it("keys are per partner", async () => {
      const a = await setup();
      const b = await setup();
      const key = `shared-${randomUUID()}`;
      await treasury().executeBatch(batchRequest(a.partner, a.payer, [{ recipientUserId: a.user }], key));
      const res = await treasury().executeBatch(batchRequest(b.partner, b.payer, [{ recipientUserId: b.user }], key));
      expect(res.replayed).to.equal(false);
    });

    it("stores nothing under the key of a rejected batch", async () => {
      const { partner, payer, user } = await setup({ balanceCents: 100n });
      const req = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 150n }]);
      await expectRefused(treasury().executeBatch(req), Reason.INSUFFICIENT_FUNDS);
      await stack.admin.treasury.fundTreasury({ clientId: partner.clientId, amountCents: 50n });
      const res = await treasury().executeBatch(req);
      expect(res.replayed).to.equal(false);
      expect(await balanceOf(partner)).to.equal(0);
    });
  });
});
