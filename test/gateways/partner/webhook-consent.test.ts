import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { requirePostgres } from "../../support/db.js";

describe("partner events after a user withdraws consent", () => {
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

  async function setup() {
    const partner = await createPartner(stack, { webhookUrl: receiver.url });
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const token = await mintPartnerToken(stack, partner);
    return { partner, token };
  }

  const typesFor = (userId: string) => receiver.received.filter((r) => r.body.includes(userId)).map((r) => (JSON.parse(r.body) as { type: string }).type);

  async function feedTypes(token: string, userId: string): Promise<string[]> {
    const res = await api(stack, "GET", "/events", { token });
    expect(res.status).to.equal(200);
    const events = (res.body as { data: { type: string; data: { user_id?: string } }[] }).data;
    return events.filter((e) => e.data.user_id === userId).map((e) => e.type);
  }

  it("hostile to the user's choice: a withdrawn scope's events waiting for a retry are never sent, and leave the feed", async () => {
    answer = 500;
    const { partner, token } = await setup();
    const { userId } = await createUserFor(stack, partner);
    const { userId: other } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending", provider: "sandbox" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 4200n });
    await stack.admin.partnerResources.recordLedgerEntry({ userId: other, direction: "credit", amountCents: 7n });
    await stack.core.webhooks.runOnce();
    expect(typesFor(userId)).to.deep.equal(["kyc.status_changed", "transfer.settled"]);

    // The user takes back transfers:read; kyc:read stays.
    await stack.admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId, scopes: { scopes: ["transfers:read"] } });
    expect(await feedTypes(token, userId)).to.deep.equal(["kyc.status_changed"]);
    answer = 204;
    stack.clock.advance(60_000);
    await stack.core.webhooks.runOnce();
    expect(typesFor(userId)).to.deep.equal(["kyc.status_changed", "transfer.settled", "kyc.status_changed"]);
    // Another user's events are untouched.
    expect(typesFor(other)).to.deep.equal(["transfer.settled", "transfer.settled"]);
    expect(await feedTypes(token, other)).to.deep.equal(["transfer.settled"]);

    // Withdrawn entirely: what was delivered also leaves the feed, and nothing more is sent.
    await stack.admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId });
    expect(await feedTypes(token, userId)).to.deep.equal([]);
  });

  it("a withdrawal stops delivery of events still waiting while the partner has no webhook URL", async () => {
    answer = 204;
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    // The id as an operator may type it: any case names the same user.
    await stack.admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId: userId.toUpperCase(), scopes: { scopes: ["kyc:read"] } });
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    await stack.core.webhooks.runOnce();
    expect(typesFor(userId)).to.deep.equal([]);
    expect(await feedTypes(token, userId)).to.deep.equal([]);
    // Consent given again: new changes flow as before.
    await stack.admin.partnerResources.grantConsent({ clientId: partner.clientId, userId, scopes: { scopes: ["kyc:read"] } });
    await stack.admin.partnerResources.setKycStatus({ userId, status: "rejected", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    expect(typesFor(userId)).to.deep.equal(["kyc.status_changed"]);
  });

  it("PostgreSQL only: a withdrawal racing many transfers leaves none of that user's transfer events, sent or in the feed", async function () {
    requirePostgres(this, "concurrent writers need several connections");
    answer = 204;
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    const { userId } = await createUserFor(stack, partner);
    const record = () => stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 1n });
    const writes = Array.from({ length: 20 }, record);
    const revoked = stack.admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId, scopes: { scopes: ["transfers:read"] } });
    await Promise.all([...writes, revoked, ...Array.from({ length: 20 }, record)]);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    await stack.core.webhooks.runOnce();
    expect(typesFor(userId)).to.deep.equal([]);
    expect(await feedTypes(token, userId)).to.deep.equal([]);
  });
});
