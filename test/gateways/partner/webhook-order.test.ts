import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { requirePostgres } from "../../support/db.js";
import { enqueue } from "../../../core/partners/webhooks/outbox-store.js";

describe("partner webhook delivery order", () => {
  let stack: TestStack;
  let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    receiver = await startWebhookReceiver();
  });
  after(async () => {
    await stack.close();
    await receiver.close();
  });

  it("PostgreSQL only: events whose changes committed out of order are sent in the order GET /events lists them", async function () {
    requirePostgres(this, "two changes committing out of order need two connections");
    const partner = await createPartner(stack);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const { userId } = await createUserFor(stack, partner, ["transfers:read"]);
    const settled = (transferId: string) => ({
      user_id: userId,
      transfer_id: transferId,
      direction: "credit",
      amount_cents: 1,
      currency: "USD",
      status: "settled",
    });
    // Two changes, as a ledger write makes them: the one that began first writes its event last.
    const first = await stack.core.db.transaction();
    const second = await stack.core.db.transaction();
    try {
      await first.raw("SELECT pg_current_xact_id()");
      await second.raw("SELECT pg_current_xact_id()");
      await enqueue(second, partner.partnerId, "transfer.settled", settled("began-second"), stack.clock());
      await second.commit();
      await enqueue(first, partner.partnerId, "transfer.settled", settled("began-first"), stack.clock());
      await first.commit();
    } finally {
      if (!first.isCompleted()) await first.rollback();
      if (!second.isCompleted()) await second.rollback();
    }
    const token = await mintPartnerToken(stack, partner, "transfers:read");
    const feed = await api(stack, "GET", "/events", { token });
    const listed = (feed.body as { data: { event_id: string }[] }).data.map((e) => e.event_id);
    expect(listed).to.have.length(2);
    while ((await stack.core.webhooks.runOnce()) > 0);
    const sent = receiver.received.filter((r) => r.body.includes(userId)).map((r) => String(r.headers["webhook-id"]));
    expect(sent).to.deep.equal(listed);
  });
});
