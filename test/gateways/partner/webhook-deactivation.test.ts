import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { requirePostgres } from "../../support/db.js";
import { reasonOf } from "../../support/refusals.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { batchRequest, bindTreasury, grantConsent, withToken } from "../../support/treasury.js";

describe("partner events of a deactivated user", () => {
  let stack: TestStack;
  let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
  let answer = 500;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    receiver = await startWebhookReceiver(() => answer);
  });
  after(async () => {
    await stack.close();
    await receiver.close();
  });

  const sentFor = (userId: string) => receiver.received.filter((r) => r.body.includes(userId)).map((r) => (JSON.parse(r.body) as { type: string }).type);

  async function feedFor(token: string, userId: string): Promise<string[]> {
    const res = await api(stack, "GET", "/events", { token });
    expect(res.status).to.equal(200);
    const events = (res.body as { data: { type: string; data: { user_id?: string } }[] }).data;
    return events.filter((e) => e.data.user_id === userId).map((e) => e.type);
  }

  it("hostile to the user: events waiting for a retry are never sent after deactivation, leave the feed, and no new ones are written", async () => {
    answer = 500;
    const partner = await createPartner(stack);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const token = await mintPartnerToken(stack, partner);
    const { userId } = await createUserFor(stack, partner);
    const { userId: other } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending", provider: "sandbox" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId: other, direction: "credit", amountCents: 7n });
    await stack.core.webhooks.runOnce();
    expect(sentFor(userId)).to.deep.equal(["kyc.status_changed"]);

    await stack.admin.partnerResources.setUserStatus({ userId: userId.toUpperCase(), status: "inactive" });
    // Changes the operator still records for the inactive user raise no event.
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 4200n });
    expect(await feedFor(token, userId)).to.deep.equal([]);
    answer = 204;
    stack.clock.advance(3600_000);
    await stack.core.webhooks.runOnce();
    expect(sentFor(userId)).to.deep.equal(["kyc.status_changed"]);
    // Another user's events are untouched.
    expect(sentFor(other)).to.deep.equal(["transfer.settled", "transfer.settled"]);
    expect(await feedFor(token, other)).to.deep.equal(["transfer.settled"]);

    // Active again: new changes flow, what was dropped stays dropped.
    await stack.admin.partnerResources.setUserStatus({ userId, status: "active" });
    await stack.admin.partnerResources.setKycStatus({ userId, status: "rejected", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    expect(sentFor(userId)).to.deep.equal(["kyc.status_changed", "kyc.status_changed"]);
    expect(await feedFor(token, userId)).to.deep.equal(["kyc.status_changed"]);
  });

  it("PostgreSQL only: a deactivation racing many transfers, KYC changes and payouts leaves none of that user's events, sent or in the feed", async function () {
    requirePostgres(this, "concurrent writers need several connections");
    answer = 204;
    const partner = await createPartner(stack, { entitlements: ["kyc:read", "transfers:read", "treasury:write"] });
    const { userId } = await createUserFor(stack, partner, ["kyc:read", "transfers:read"]);
    await grantConsent(stack.admin, partner, userId, ["payouts:receive"]);
    const payer = await bindTreasury(stack.admin, partner);
    const treasury = await withToken(stack.clients, partner, "treasury:write");
    const token = await mintPartnerToken(stack, partner, "kyc:read transfers:read");
    const payouts: (Reason | undefined)[] = [];
    const writes = (from: number) =>
      Array.from({ length: 12 }, async (_, i) => {
        const n = from + i;
        if (n % 3 === 0) await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 1n });
        else if (n % 3 === 1) await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: `p${n}` });
        else {
          // A payout to a recipient deactivated first is refused user_inactive; the race is in its events.
          const paid = stack.clients.treasury.executeBatch(batchRequest(treasury, payer, [{ recipientUserId: userId, amountCents: 1n }]));
          payouts.push(await paid.then(() => undefined, reasonOf));
        }
      });
    const deactivated = stack.admin.partnerResources.setUserStatus({ userId, status: "inactive" });
    await Promise.all([...writes(0), deactivated, ...writes(12)]);
    expect(payouts.filter((r) => r !== undefined && r !== Reason.USER_INACTIVE)).to.deep.equal([]);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    await stack.core.webhooks.runOnce();
    // A payout that won the race is the payer's money moved: its own payout.executed receipt stays.
    const paid = payouts.filter((r) => r === undefined).length;
    expect(sentFor(userId)).to.deep.equal(Array.from({ length: paid }, () => "payout.executed"));
    expect(await feedFor(token, userId)).to.deep.equal([]);
  });
});
