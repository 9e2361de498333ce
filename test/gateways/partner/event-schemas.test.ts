import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Webhook } from "standardwebhooks";
import { startStack, type TestStack } from "../../support/stack.js";
import { api } from "../../support/resources.js";
import { loadOpenApi, type OpenApiChecker } from "../../support/openapi.js";
import { partnerWithPayee } from "../../support/treasury.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";

interface Event {
  type: string;
  data: Record<string, unknown>;
}

/** Each event kind's `data` has its own schema in the OpenAPI document, for the feed and for webhooks. */
describe("partner events: every kind's data is described by the document", () => {
  let stack: TestStack;
  let openapi: OpenApiChecker;
  let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
  before(async function () {
    this.timeout(120_000);
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    openapi = await loadOpenApi(stack.url);
    receiver = await startWebhookReceiver();
  });
  after(async () => {
    await stack.close();
    await receiver.close();
  });

  it("GET /events and the signed deliveries match their kind's schema, and a wrong data does not", async () => {
    const { partner, payer, userId, token } = await partnerWithPayee(stack, {
      balanceCents: 10_000n,
      scopes: ["kyc:read", "transfers:read"],
      webhookUrl: receiver.url,
    });
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "debit", amountCents: 5n, status: "failed" });
    const item = {
      execution_id: `ex-${randomUUID()}`,
      payout_id: `po-${randomUUID()}`,
      recipient: { user_id: userId },
      amount_cents: 700,
      currency: "USD",
      reference: "May",
    };
    const paid = await api(stack, "POST", "/treasury/payouts", {
      token,
      json: { payer_entity_id: payer, items: [item] },
      headers: { "idempotency-key": `k-${randomUUID()}` },
    });
    expect(paid.status, paid.text).to.equal(200);

    const res = await api(stack, "GET", "/events?limit=100", { token });
    openapi.check("GET", "/events", res);
    const events = (res.body as { data: Event[] }).data;
    expect(new Set(events.map((e) => e.type))).to.deep.equal(new Set(["kyc.status_changed", "transfer.failed", "payout.executed", "transfer.settled"]));
    for (const e of events) {
      openapi.matches("Event", e);
      // A data of another kind, or none, is not this kind's.
      expect(openapi.accepts("Event", { ...e, data: {} }), e.type).to.equal(false);
      const other = events.find((o) => o.type.split(".")[0] !== e.type.split(".")[0])!;
      expect(openapi.accepts("Event", { ...e, data: other.data }), `${e.type} with ${other.type}'s data`).to.equal(false);
    }

    await stack.core.webhooks.runOnce();
    const delivered = receiver.received.map((r) => new Webhook(secret).verify(r.body, r.headers as Record<string, string>) as Event);
    expect(delivered).to.have.length(events.length);
    for (const d of delivered) {
      openapi.matches("WebhookPayload", d);
      expect(openapi.accepts("WebhookPayload", { ...d, data: { ...d.data, surprise: 1 } }), d.type).to.equal(false);
    }
  });
});
