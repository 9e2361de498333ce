import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, createRecipient, withToken } from "../../support/treasury.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

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
    const first = batchRequest(partner, payer, [
      { recipientUserId: user, amountCents: 100n },
      { recipientUserId: user, amountCents: 200n },
    ]);
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
