import { expect } from "chai";
import { bearerMd, grpcCoreSuite, type WireResponse } from "../../support/grpc-core.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";

const PARTNERS = "vaultgate.partners.v1.PartnersService";

/** The operator sees, over gRPC on core's real port, when a partner's webhook URL answered 410 Gone and was paused. */
describe("webhook pause shown to the operator", function () {
  this.timeout(60_000);
  const suite = grpcCoreSuite({ webhookPollMs: 0 });
  const closers: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of closers.reverse()) await c();
  });

  const admin = () => bearerMd(suite.stack.adminToken);
  const getPartner = async (clientId: string) => (await suite.core.call(PARTNERS, "GetPartner", { client_id: clientId }, admin())).partner as WireResponse;
  /** The partner as ListPartners pages it (the database is shared: page until found, bounded). */
  async function listed(clientId: string): Promise<WireResponse | undefined> {
    let cursor = "";
    for (let pages = 0; pages < 1000; pages++) {
      const res = await suite.core.call(PARTNERS, "ListPartners", { limit: 200, cursor }, admin());
      const found = (res.partners as WireResponse[]).find((p) => p.client_id === clientId);
      if (found || !res.next_cursor) return found;
      cursor = String(res.next_cursor);
    }
    return undefined;
  }
  const seconds = (d: Date) => String(Math.floor(d.getTime() / 1000));

  it("GetPartner and ListPartners carry webhook_gone_at from the 410 until the URL is set again; unset before and after", async () => {
    const { stack } = suite;
    let status = 410;
    const r = await startWebhookReceiver(() => status);
    closers.push(() => r.close());
    const partner = await createPartner(stack, { webhookUrl: r.url });
    expect((await getPartner(partner.clientId)).webhook_gone_at).to.equal(null);

    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 5n });
    stack.clock.advance(1500);
    const goneAt = stack.clock();
    while (r.received.length === 0) await stack.core.webhooks.runOnce();

    const paused = await getPartner(partner.clientId);
    expect(paused.webhook_url).to.equal(r.url);
    expect(paused.webhook_gone_at, "webhook_gone_at once paused").to.deep.include({ seconds: seconds(goneAt), nanos: (goneAt.getTime() % 1000) * 1e6 });
    expect((await listed(partner.clientId))?.webhook_gone_at).to.deep.equal(paused.webhook_gone_at);

    status = 204;
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: r.url });
    expect((await getPartner(partner.clientId)).webhook_gone_at).to.equal(null);
    expect((await listed(partner.clientId))?.webhook_gone_at).to.equal(null);
  });
});
