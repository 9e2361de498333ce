import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { toBinary } from "@bufbuild/protobuf";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { ExecuteBatchResponseSchema, ItemStatus, TreasuryStatus } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, type TestPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, createRecipient, grantConsent, revokeConsent, withToken, type BatchItemInit, type TreasuryPartner } from "../../support/treasury.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";


describe("TreasuryService.ExecuteBatch", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const treasury = () => stack.clients.treasury;
  const balanceOf = async (p: TreasuryPartner) => Number((await treasury().getTreasury({ accessToken: p.token })).treasury!.availableCents);
  const executionCount = async (p: TestPartner) => {
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM treasury_executions WHERE partner_id = ?`, [p.partnerId]);
    return (rows as { n: number }[])[0]!.n;
  };
  const auditOf = async (p: TestPartner) =>
    (await stack.admin.audit.listRecords({ actor: `partner:${p.clientId}`, action: "treasury.batch.execute", limit: 500 })).records;

  async function setup(bind: Parameters<typeof bindTreasury>[2] = {}) {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["payouts:receive", "treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, bind);
    const user = await createRecipient(stack.admin, partner);
    return { partner, payer, user };
  }

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
    expect(payout.payout).to.include({ executionId: req.items![1]!.executionId, batchId: res.batch!.batchId, userId: user, amountCents: 2_500n, currency: "USD", status: "executed" });
    const audit = await auditOf(partner);
    expect(audit.map((r) => [r.reason, r.subject])).to.deep.equal([["", res.batch!.batchId]]);
  });

  describe("check order (DESIGN 4.4)", () => {
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
      const req = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 300n }, { recipientUserId: user, amountCents: 200n }]);
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
        await expectRefused(treasury().getPayout({ accessToken: partner.token, userId: other, payoutId: second.items![0]!.payoutId! }), 
          Reason.NOT_FOUND,
        );
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
      const req = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 300n }, { recipientUserId: user, amountCents: 200n }]);
      const r = await refusalOf(treasury().executeBatch(req));
      expect(r).to.include({ reason: Reason.POLICY_DENIED, limitName: "per_day_cap" });
      noDigits(r.message);
      stack.clock.set(new Date("2030-01-02T00:00:00Z"));
      const ok = await treasury().executeBatch(req);
      expect(ok.batch!.totalCents).to.equal(500n);
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
    for (const status of [TreasuryStatus.SUSPENDED, TreasuryStatus.DISABLED, TreasuryStatus.MANDATE_EXPIRED]) {
      it(`${TreasuryStatus[status].toLowerCase()} is treasury_inactive; after reactivation the same ids succeed`, async () => {
        const { partner, payer, user } = await setup();
        await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status });
        const req = batchRequest(partner, payer, [{ recipientUserId: user }]);
        expect(await refusalOf(treasury().executeBatch(req))).to.include({ reason: Reason.TREASURY_INACTIVE, code: Code.PermissionDenied });
        await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.ACTIVE });
        expect((await treasury().executeBatch(req)).replayed).to.equal(false);
      });
    }

    it("a partner without a treasury gets treasury_not_configured on read and batch", async () => {
      const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
      expect(await refusalOf(treasury().getTreasury({ accessToken: partner.token }))).to.include({ reason: Reason.TREASURY_NOT_CONFIGURED, code: Code.NotFound });
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
      await expectRefused(treasury().executeBatch(batchRequest(partner, payer, [{ recipientUserId: randomUUID() }])), 
        Reason.GRANT_REQUIRED,
      );
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
      await expectRefused(stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.ACTIVE }), 
        Reason.TREASURY_NOT_CONFIGURED,
      );
    });
  });
});

describe("TreasuryService.ExecuteBatch when the audit trail is unavailable", () => {
  let stack: TestStack;
  let failAudit = false;
  before(async () => {
    stack = await startStack({ auditFaults: { appendFault: () => (failAudit ? new Error("audit down") : undefined) } });
  });
  after(() => stack.close());

  it("withholds the batch (audit_unavailable), executes nothing, and the identical retry succeeds", async () => {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents: 1_000n });
    const user = await createRecipient(stack.admin, partner);
    const req = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 400n }]);
    failAudit = true;
    try {
      const r = await refusalOf(stack.clients.treasury.executeBatch(req));
      expect(r).to.include({ reason: Reason.AUDIT_UNAVAILABLE, code: Code.Unavailable });
    } finally {
      failAudit = false;
    }
    expect(Number((await stack.clients.treasury.getTreasury({ accessToken: partner.token })).treasury!.availableCents)).to.equal(1_000);
    const res = await stack.clients.treasury.executeBatch(req);
    expect(res.replayed).to.equal(false);
    expect(Number((await stack.clients.treasury.getTreasury({ accessToken: partner.token })).treasury!.availableCents)).to.equal(600);
  });
});

describe("TreasuryService partner access and events", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  async function setup() {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["payouts:receive", "treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents: 10_000n });
    const user = await createRecipient(stack.admin, partner);
    return { partner, payer, user };
  }

  it("needs a valid token carrying treasury:write; consent scopes alone are grant_required", async () => {
    const { partner, payer, user } = await setup();
    const narrow = await withToken(stack.clients, partner, "payouts:receive");
    expect(await refusalOf(stack.clients.treasury.executeBatch(batchRequest(narrow, payer, [{ recipientUserId: user }])))).to.include({
      reason: Reason.GRANT_REQUIRED,
      code: Code.PermissionDenied,
    });
    await expectRefused(stack.clients.treasury.getTreasury({ accessToken: narrow.token }), Reason.GRANT_REQUIRED);
    await expectRefused(stack.clients.treasury.getTreasury({ accessToken: "x.y.z" }), Reason.INVALID_TOKEN);
    // A receipt needs payouts:receive in the token too.
    const treasuryOnly = await withToken(stack.clients, partner, "treasury:write");
    const req = batchRequest(treasuryOnly, payer, [{ recipientUserId: user }]);
    await stack.clients.treasury.executeBatch(req);
    const payoutId = req.items[0]!.payoutId;
    await expectRefused(stack.clients.treasury.getPayout({ accessToken: treasuryOnly.token, userId: user, payoutId }), Reason.GRANT_REQUIRED);
    const receipt = await stack.clients.treasury.getPayout({ accessToken: partner.token, userId: user, payoutId });
    expect(receipt.payout!.payoutId).to.equal(payoutId);
    const audit = await stack.admin.audit.listRecords({ actor: `partner:${partner.clientId}`, limit: 100 });
    expect(audit.records.map((r) => [r.action, r.reason])).to.deep.include.members([
      ["partner.treasury.payout", "grant_required"],
      ["partner.treasury.read", "grant_required"],
      ["treasury.batch.execute", ""],
      ["partner.payouts.read", ""],
    ]);
  });

  it("a body the gateway found malformed is refused after authentication and audited", async () => {
    const { partner, payer, user } = await setup();
    const req = { ...batchRequest(partner, payer, [{ recipientUserId: user }]), bodyProblem: "unknown field: memo" };
    const r = await refusalOf(stack.clients.treasury.executeBatch(req));
    expect(r).to.include({ reason: Reason.INVALID_REQUEST, message: "unknown field: memo" });
    const audit = await stack.admin.audit.listRecords({ actor: `partner:${partner.clientId}`, action: "treasury.batch.execute" });
    expect(audit.records.map((r) => r.reason)).to.deep.equal(["invalid_request"]);
  });

  it("writes one payout.executed event per batch listing the payouts it paid, in the batch's transaction", async () => {
    const { partner, payer, user } = await setup();
    const first = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 100n }, { recipientUserId: user, amountCents: 200n }]);
    const done = await stack.clients.treasury.executeBatch(first);
    // Rejected and replayed batches write nothing; already executed items are not announced again.
    await refusalOf(stack.clients.treasury.executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 99_999n }])));
    await stack.clients.treasury.executeBatch(first);
    await stack.clients.treasury.executeBatch({ ...first, idempotencyKey: `k-${randomUUID()}` });
    const second = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 300n }]);
    second.items.unshift(first.items[0]!);
    const next = await stack.clients.treasury.executeBatch(second);

    const events = await stack.clients.partnerResources.listEvents({ accessToken: partner.token, page: { limit: 100 } });
    expect(events.data.map((e) => e.type)).to.deep.equal(["payout.executed", "payout.executed"]);
    type Data = { batch_id: string; total_cents: number; payouts: { payout_id: string; amount_cents: number }[] };
    const [a, b] = events.data.map((e) => JSON.parse(e.dataJson) as Data);
    expect(a).to.deep.include({ batch_id: done.batch!.batchId, payer_entity_id: payer, currency: "USD", total_cents: 300 });
    expect(a!.payouts).to.deep.equal([
      { payout_id: first.items[0]!.payoutId, execution_id: first.items[0]!.executionId, user_id: user, amount_cents: 100, reference: "invoice 1" },
      { payout_id: first.items[1]!.payoutId, execution_id: first.items[1]!.executionId, user_id: user, amount_cents: 200, reference: "invoice 1" },
    ]);
    expect(b).to.deep.include({ batch_id: next.batch!.batchId, total_cents: 300 });
    expect(b!.payouts.map((p) => p.payout_id)).to.deep.equal([second.items[1]!.payoutId]);
  });
});
