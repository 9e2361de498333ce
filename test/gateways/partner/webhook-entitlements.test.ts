import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken, type TestPartner } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { feedsSettled, requirePostgres } from "../../support/db.js";
import { bindTreasury, grantConsent } from "../../support/treasury.js";

type Receiver = Awaited<ReturnType<typeof startWebhookReceiver>>;

/** A partner receives (and lists) only the events its entitlements and the user's consent both allow. */
describe("partner events and the partner's entitlements", () => {
  let stack: TestStack;
  const receivers: Receiver[] = [];
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(async () => {
    await stack.close();
    for (const r of receivers) await r.close();
  });

  async function partnerWithWebhook(entitlements: string[]) {
    const receiver = await startWebhookReceiver();
    receivers.push(receiver);
    const partner = await createPartner(stack, { entitlements });
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    return { partner, receiver };
  }

  const sent = (receiver: Receiver) => receiver.received.map((r) => (JSON.parse(r.body) as { type: string }).type);

  async function feedTypes(partner: TestPartner): Promise<string[]> {
    await feedsSettled(stack.core.db);
    const res = await api(stack, "GET", "/events?limit=100", { token: await mintPartnerToken(stack, partner) });
    expect(res.status, res.text).to.equal(200);
    return (res.body as { data: { type: string }[] }).data.map((e) => e.type);
  }

  const payout = (token: string, payer: string, userId: string) =>
    api(stack, "POST", "/treasury/payouts", {
      token,
      headers: { "idempotency-key": `k-${randomUUID()}` },
      json: {
        payer_entity_id: payer,
        items: [
          {
            execution_id: `ex-${randomUUID()}`,
            payout_id: `po-${randomUUID()}`,
            recipient: { user_id: userId },
            amount_cents: 5,
            currency: "USD",
            reference: "r",
          },
        ],
      },
    });

  it("hostile partner: a consent to transfers:read without the entitlement brings no transfer events, by webhook or in the feed granted later", async () => {
    const hostile = await partnerWithWebhook(["kyc:read"]);
    const payer = await partnerWithWebhook(["treasury:write", "payouts:receive"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner);
    const { userId } = await createUserFor(stack, hostile.partner); // every consent scope
    await grantConsent(stack.admin, payer.partner, userId, ["payouts:receive", "transfers:read"]);
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 7n });
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "debit", amountCents: 3n, status: "failed" });
    expect((await payout(await mintPartnerToken(stack, payer.partner), payerEntity, userId)).status).to.equal(200);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending", provider: "sandbox" });
    await stack.core.webhooks.runOnce();

    expect(sent(hostile.receiver)).to.deep.equal(["kyc.status_changed"]);
    // The payer holds treasury:write only: its own receipt, not the recipient's transfers.
    expect(sent(payer.receiver)).to.deep.equal(["payout.executed"]);
    // Entitled later: only what was raised from then on, never what was raised before.
    await stack.admin.partners.setEntitlements({ clientId: hostile.partner.clientId, entitlements: ["kyc:read", "transfers:read"] });
    expect(await feedTypes(hostile.partner)).to.deep.equal(["kyc.status_changed"]);
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 9n });
    await stack.core.webhooks.runOnce();
    expect(sent(hostile.receiver)).to.deep.equal(["kyc.status_changed", "transfer.settled"]);
    expect(await feedTypes(hostile.partner)).to.deep.equal(["kyc.status_changed", "transfer.settled"]);
  });

  it("events queued while entitled wait once the entitlement is withdrawn, and go out if it is given back", async () => {
    const reader = await partnerWithWebhook(["kyc:read", "transfers:read", "treasury:write"]);
    const { userId } = await createUserFor(stack, reader.partner);
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 7n });
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending", provider: "sandbox" });
    await stack.admin.partners.setEntitlements({ clientId: reader.partner.clientId, entitlements: ["kyc:read"] });
    await stack.core.webhooks.runOnce();
    expect(sent(reader.receiver)).to.deep.equal(["kyc.status_changed"]);
    // Other tests' partners share the database: passes until nothing is due, then only this receiver counts.
    while ((await stack.core.webhooks.runOnce()) > 0);
    expect(sent(reader.receiver)).to.deep.equal(["kyc.status_changed"]);
    await stack.admin.partners.setEntitlements({ clientId: reader.partner.clientId, entitlements: ["kyc:read", "transfers:read"] });
    await stack.core.webhooks.runOnce();
    expect(sent(reader.receiver)).to.deep.equal(["kyc.status_changed", "transfer.settled"]);
  });

  it("PostgreSQL only: transfers and payouts racing an entitlement withdrawal send nothing of that kind after it, and never to the unentitled", async function () {
    requirePostgres(this, "concurrent writers need several connections");
    const hostile = await partnerWithWebhook(["kyc:read", "payouts:receive"]);
    const toggled = await partnerWithWebhook(["transfers:read"]);
    const honest = await partnerWithWebhook(["transfers:read"]);
    const payer = await partnerWithWebhook(["treasury:write"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner);
    const payerToken = await mintPartnerToken(stack, payer.partner);
    const users = await Promise.all(Array.from({ length: 4 }, () => createUserFor(stack, hostile.partner).then((u) => u.userId)));
    for (const u of users) {
      for (const p of [toggled, honest]) await grantConsent(stack.admin, p.partner, u, ["transfers:read"]);
      await grantConsent(stack.admin, payer.partner, u, ["payouts:receive", "transfers:read"]);
    }
    const writes = Array.from({ length: 24 }, async (_, n) => {
      const userId = users[n % users.length]!;
      if (n % 2 === 0) await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 1n });
      else expect((await payout(payerToken, payerEntity, userId)).status).to.equal(200);
    });
    const withdrawn = stack.admin.partners.setEntitlements({ clientId: toggled.partner.clientId, entitlements: [] });
    await Promise.all([...writes.slice(0, 12), withdrawn, ...writes.slice(12), stack.core.webhooks.runOnce()]);
    const before = sent(toggled.receiver).length;
    await stack.core.webhooks.runOnce();
    await stack.core.webhooks.runOnce();
    expect(sent(toggled.receiver)).to.have.length(before);
    expect(sent(hostile.receiver)).to.deep.equal([]);
    expect(sent(payer.receiver)).to.deep.equal(Array(12).fill("payout.executed"));
    expect(sent(honest.receiver)).to.deep.equal(Array(24).fill("transfer.settled"));
    await stack.admin.partners.setEntitlements({ clientId: hostile.partner.clientId, entitlements: ["transfers:read"] });
    expect(await feedTypes(hostile.partner)).to.deep.equal([]);
  });
});
