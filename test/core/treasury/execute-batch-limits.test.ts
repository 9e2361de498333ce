import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { ItemStatus, TreasuryStatus } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, createRecipient, revokeConsent, withToken, type BatchItemInit } from "../../support/treasury.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { treasuryKit } from "../../support/treasury.js";

describe("TreasuryService.ExecuteBatch: execution ids, limits and treasury state", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const { treasury, balanceOf, executionCount, setup } = treasuryKit(() => stack);

  describe("execution ids", () => {
    const changes: [string, (item: BatchItemInit, ctx: { other: string }) => void][] = [
      ["recipient", (i, c) => (i.recipientUserId = c.other)],
      ["payout_id", (i) => (i.payoutId = `po-${randomUUID()}`)],
      ["amount", (i) => (i.amountCents = 101n)],
      ["currency", (i) => (i.currency = "EUR")],
      ["reference", (i) => (i.reference = "invoice 2")],
    ];
    for (const [field, change] of changes) {
      it(`a reused execution_id with a changed ${field} is execution_conflict and nothing of the batch executes`, async () => {
        const { partner, payer, user } = await setup({ balanceCents: 10_000n });
        const other = await createRecipient(stack.admin, partner);
        const first = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 100n }]);
        await treasury().executeBatch(first);
        const reused = { ...first.items[0]! };
        change(reused, { other });
        const second = batchRequest(partner, payer, [{ recipientUserId: other, amountCents: 700n }]);
        second.items!.push(reused);
        const r = await refusalOf(treasury().executeBatch(second));
        expect(r).to.include({ reason: Reason.EXECUTION_CONFLICT, code: Code.AlreadyExists });
        expect(r.message).to.contain("items[1]");
        expect(await balanceOf(partner)).to.equal(9_900);
        expect(await executionCount(partner)).to.equal(1);
        await expectRefused(treasury().getPayout({ accessToken: partner.token, userId: other, payoutId: second.items![0]!.payoutId! }), Reason.NOT_FOUND);
      });
    }

    it("a reused execution_id under a rebound payer is execution_conflict", async () => {
      const { partner, payer, user } = await setup();
      const first = batchRequest(partner, payer, [{ recipientUserId: user }]);
      await treasury().executeBatch(first);
      const newPayer = await bindTreasury(stack.admin, partner);
      const r = await refusalOf(treasury().executeBatch({ ...first, idempotencyKey: `k-${randomUUID()}`, payerEntityId: newPayer }));
      expect(r.reason).to.equal(Reason.EXECUTION_CONFLICT);
    });

    it("a payout_id paid under another execution_id is execution_conflict", async () => {
      const { partner, payer, user } = await setup();
      const first = batchRequest(partner, payer, [{ recipientUserId: user }]);
      await treasury().executeBatch(first);
      const second = batchRequest(partner, payer, [{ recipientUserId: user, payoutId: first.items![0]!.payoutId! }]);
      await expectRefused(treasury().executeBatch(second), Reason.EXECUTION_CONFLICT);
    });

    it("an unchanged execution_id is reported already_executed and not paid twice", async () => {
      const { partner, payer, user } = await setup({ balanceCents: 1_000n });
      const first = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 400n }]);
      const done = await treasury().executeBatch(first);
      stack.clock.advance(5_000);
      const second = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 250n }]);
      second.items!.unshift(first.items![0]!);
      const res = await treasury().executeBatch(second);
      expect(res.batch!.items.map((i) => i.status)).to.deep.equal([ItemStatus.ALREADY_EXECUTED, ItemStatus.EXECUTED]);
      expect(res.batch!.items[0]!.executedAt).to.deep.equal(done.batch!.items[0]!.executedAt);
      expect(res.batch!.totalCents).to.equal(250n);
      expect(await balanceOf(partner)).to.equal(350);
      // A batch of nothing but already executed items pays nothing and still succeeds.
      const onlyOld = await treasury().executeBatch({ ...first, idempotencyKey: `k-${randomUUID()}` });
      expect(onlyOld.batch!.totalCents).to.equal(0n);
      expect(await balanceOf(partner)).to.equal(350);
    });
  });

  describe("limits", () => {
    const noDigits = (m: string) => expect(m).to.not.match(/\d/);

    it("per_item_cap and step_up_amount name the limit only", async () => {
      const { partner, payer, user } = await setup({ capPerItemCents: 500n, stepUpAmountCents: 300n });
      const over = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 501n }])));
      expect(over).to.include({ reason: Reason.POLICY_DENIED, limitName: "per_item_cap", code: Code.PermissionDenied });
      expect(over.message).to.contain("per_item_cap");
      noDigits(over.message);
      const stepUp = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 301n }])));
      expect(stepUp).to.include({ reason: Reason.POLICY_DENIED, limitName: "step_up_amount" });
      noDigits(stepUp.message);
      await treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 300n }]));
    });

    it("per_day_cap counts what was paid today (UTC) and resets the next day", async () => {
      stack.clock.set(new Date("2030-01-01T23:00:00Z"));
      const { partner, payer, user } = await setup({ capPerDayCents: 1_000n });
      await treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 600n }]));
      const req = batchRequest(partner, payer, [
        { recipientUserId: user, amountCents: 300n },
        { recipientUserId: user, amountCents: 200n },
      ]);
      const r = await refusalOf(treasury().executeBatch(req));
      expect(r).to.include({ reason: Reason.POLICY_DENIED, limitName: "per_day_cap" });
      noDigits(r.message);
      stack.clock.set(new Date("2030-01-02T00:00:00Z"));
      const ok = await treasury().executeBatch(req);
      expect(ok.batch!.totalCents).to.equal(500n);
    });

    it("per_day_cap holds when a batch stamped before midnight commits after one stamped after it (a replica's clock behind)", async () => {
      stack.clock.set(new Date("2030-03-01T00:00:00.500Z"));
      const { partner, payer, user } = await setup({ capPerDayCents: 1_000n });
      await treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 1_000n }]));
      // Another replica, 0.6 s behind, still reads 28 February: 1 March is full, so nothing more fits.
      stack.clock.set(new Date("2030-02-28T23:59:59.900Z"));
      const late = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 100n }])));
      expect(late).to.include({ reason: Reason.POLICY_DENIED, limitName: "per_day_cap" });
      stack.clock.set(new Date("2030-03-01T00:00:01Z"));
      const over = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 1_000n }])));
      expect(over).to.include({ reason: Reason.POLICY_DENIED, limitName: "per_day_cap" });
      expect(await balanceOf(partner)).to.equal(1_000_000 - 1_000);
    });

    it("lifetime_cap counts every payout", async () => {
      const { partner: first, payer, user } = await setup({ capLifetimeCents: 1_000n });
      await treasury().executeBatch(batchRequest(first, payer, [{ recipientUserId: user, amountCents: 700n }]));
      stack.clock.advance(3 * 86_400_000);
      const partner = await withToken(stack.clients, first); // the first token has expired meanwhile
      const r = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 301n }])));
      expect(r).to.include({ reason: Reason.POLICY_DENIED, limitName: "lifetime_cap" });
      await treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 300n }]));
    });
  });

  describe("treasury state", () => {
    const said = {
      [TreasuryStatus.SUSPENDED]: "the treasury is suspended",
      [TreasuryStatus.DISABLED]: "the treasury is disabled",
      [TreasuryStatus.MANDATE_EXPIRED]: "the treasury's mandate has expired",
    };
    for (const status of [TreasuryStatus.SUSPENDED, TreasuryStatus.DISABLED, TreasuryStatus.MANDATE_EXPIRED] as const) {
      it(`${TreasuryStatus[status].toLowerCase()} is treasury_inactive, saying so in words; after reactivation the same ids succeed`, async () => {
        const { partner, payer, user } = await setup();
        await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status });
        const req = batchRequest(partner, payer, [{ recipientUserId: user }]);
        expect(await refusalOf(treasury().executeBatch(req))).to.include({
          reason: Reason.TREASURY_INACTIVE,
          code: Code.PermissionDenied,
          message: said[status],
        });
        await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.ACTIVE });
        expect((await treasury().executeBatch(req)).replayed).to.equal(false);
      });
    }

    it("a partner without a treasury gets treasury_not_configured on read and batch", async () => {
      const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
      expect(await refusalOf(treasury().getTreasury({ accessToken: partner.token }))).to.include({
        reason: Reason.TREASURY_NOT_CONFIGURED,
        code: Code.NotFound,
      });
    });

    it("a suspended partner is refused before anything else", async () => {
      const { partner, payer, user } = await setup();
      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: 3 });
      await expectRefused(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user }])), Reason.PARTNER_INACTIVE);
      await expectRefused(treasury().getTreasury({ accessToken: partner.token }), Reason.PARTNER_INACTIVE);
    });

    it("GetTreasury shows status, payer, currency and available balance", async () => {
      const { partner, payer } = await setup({ balanceCents: 4_200n, currency: "EUR", capPerDayCents: 10n });
      const t = (await treasury().getTreasury({ accessToken: partner.token })).treasury!;
      expect(t).to.include({ status: TreasuryStatus.ACTIVE, payerEntityId: payer, currency: "EUR", availableCents: 4_200n, capPerDayCents: 10n });
    });
  });

  describe("recipients", () => {
    it("a recipient without payouts:receive (even with other scopes, or unknown) is grant_required", async () => {
      const { partner, payer } = await setup();
      const narrow = await createRecipient(stack.admin, partner, ["kyc:read"]);
      await expectRefused(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: narrow }])), Reason.GRANT_REQUIRED);
      await expectRefused(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: randomUUID() }])), Reason.GRANT_REQUIRED);
    });

    it("consent given to another partner does not count", async () => {
      const { partner, payer } = await setup();
      const other = await createPartner(stack);
      const user = await createRecipient(stack.admin, other);
      await expectRefused(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user }])), Reason.GRANT_REQUIRED);
    });
  });

  describe("GetPayout", () => {
    it("needs the recipient's payouts:receive consent and hides other users' payouts", async () => {
      const { partner, payer, user } = await setup();
      const req = batchRequest(partner, payer, [{ recipientUserId: user }]);
      await treasury().executeBatch(req);
      const payoutId = req.items![0]!.payoutId!;
      const other = await createRecipient(stack.admin, partner);
      await expectRefused(treasury().getPayout({ accessToken: partner.token, userId: other, payoutId }), Reason.NOT_FOUND);
      const stranger = await withToken(stack.clients, await createPartner(stack));
      await expectRefused(treasury().getPayout({ accessToken: stranger.token, userId: user, payoutId }), Reason.USER_NOT_FOUND);
      await revokeConsent(stack.admin, partner, user);
      await expectRefused(treasury().getPayout({ accessToken: partner.token, userId: user, payoutId }), Reason.GRANT_REQUIRED);
    });
  });

  describe("admin RPCs", () => {
    it("need the operator credential", async () => {
      const partner = await createPartner(stack);
      const r = await refusalOf(stack.clients.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId: randomUUID(), balanceCents: 1n }));
      expect(r.reason).to.equal(Reason.ADMIN_UNAUTHENTICATED);
    });

    it("bind reports created, then replaces the binding but keeps spent totals", async () => {
      const { partner, payer, user } = await setup({ capLifetimeCents: 500n });
      await treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 400n }]));
      const again = await stack.admin.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId: payer, balanceCents: 5_000n, capLifetimeCents: 500n });
      expect(again.created).to.equal(false);
      const r = await refusalOf(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 101n }])));
      expect(r.limitName).to.equal("lifetime_cap");
    });

    it("fund and set-status on a partner without a treasury are treasury_not_configured", async () => {
      const partner = await createPartner(stack);
      await expectRefused(stack.admin.treasury.fundTreasury({ clientId: partner.clientId, amountCents: 1n }), Reason.TREASURY_NOT_CONFIGURED);
      await expectRefused(
        stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.ACTIVE }),
        Reason.TREASURY_NOT_CONFIGURED,
      );
    });
  });
});
