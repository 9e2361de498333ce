import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken, type TestPartner } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";

type Receiver = Awaited<ReturnType<typeof startWebhookReceiver>>;

/** A receiver answering 410 Gone: its URL gets nothing more until it is set again, and no event is lost. */
describe("webhook endpoint answering 410 Gone", function () {
  this.timeout(60_000);
  let stack: TestStack;
  const closers: (() => Promise<void>)[] = [];
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(async () => {
    for (const c of closers.reverse()) await c();
    await stack?.close();
  });

  const receiver = async (status: () => number = () => 204) => {
    const r = await startWebhookReceiver(status);
    closers.push(() => r.close());
    return r;
  };

  /** A partner at `url` with `count` transfer events queued; its feed order and the secret SetWebhook gave. */
  async function queued(url: string, count: number) {
    const partner = await createPartner(stack);
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url });
    const { userId } = await createUserFor(stack, partner);
    for (let i = 1; i <= count; i++) await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: BigInt(i) });
    const token = await mintPartnerToken(stack, partner);
    const feed = await api(stack, "GET", "/events", { token });
    const listed = (feed.body as { data: { event_id: string }[] }).data.map((e) => e.event_id);
    expect(listed).to.have.length(count);
    return { partner, secret, listed };
  }

  const ids = (r: Receiver) => r.received.map((w) => String(w.headers["webhook-id"]));
  const states = async (p: TestPartner) =>
    (await stack.core.db.raw(`SELECT delivery_state FROM partner_events WHERE partner_id = ? ORDER BY seq`, [p.partnerId])).rows.map(
      (r: { delivery_state: string }) => r.delivery_state,
    );
  // Other tests' partners share the database: what counts is what this test's receivers saw.
  const drain = async () => {
    while ((await stack.core.webhooks.runOnce()) > 0);
  };

  it("gets one request; nothing more goes to it, past every backoff; the events wait and go, in feed order, to the URL set next", async () => {
    const goneR = await receiver(() => 410);
    const { partner, secret, listed } = await queued(goneR.url, 3);
    await drain();
    expect(ids(goneR)).to.deep.equal([listed[0]]);
    stack.clock.advance(7 * 3600_000);
    await drain();
    expect(ids(goneR)).to.deep.equal([listed[0]]);
    expect(await states(partner)).to.deep.equal(["pending", "pending", "pending"]);
    const warn = stack.logs
      .text()
      .split("\n")
      .find((l) => l.includes("410 Gone: deliveries pause") && l.includes(partner.partnerId));
    expect(warn, "warn line naming the partner").to.be.a("string").and.include('"level":40');
    expect(stack.logs.text()).to.not.include(secret.slice("whsec_".length));

    const next = await receiver();
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: next.url });
    await drain();
    expect(ids(next)).to.deep.equal(listed);
    expect(ids(goneR)).to.have.length(1);
    expect(await states(partner)).to.deep.equal(["delivered", "delivered", "delivered"]);
  });

  it("setting the same URL again resumes it: the event it refused goes first", async () => {
    let status = 410;
    const r = await receiver(() => status);
    const { partner, listed } = await queued(r.url, 2);
    await drain();
    status = 204;
    await drain();
    expect(ids(r)).to.deep.equal([listed[0]]);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: r.url });
    await drain();
    expect(ids(r)).to.deep.equal([listed[0], ...listed]);
  });

  it("a 410 from a URL the operator already replaced does not pause the new one: the event goes there", async () => {
    const old = await receiver();
    old.hold();
    const { partner, listed } = await queued(old.url, 2);
    const pass = stack.core.webhooks.runOnce();
    await old.waitFor(1);
    const next = await receiver();
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: next.url });
    old.release(410);
    await pass;
    await drain();
    expect(ids(old)).to.deep.equal([listed[0]]);
    expect(ids(next)).to.deep.equal(listed);
    expect(stack.logs.text()).to.include("answered 410 Gone but was set again since");
  });

  const goneAt = async (p: TestPartner) =>
    (await stack.core.db.raw(`SELECT webhook_gone_at FROM partners WHERE id = ?`, [p.partnerId])).rows[0].webhook_gone_at as unknown;

  it("a 410 to a request sent before the same URL was set again pauses nothing: the refused event goes again first", async () => {
    const r = await receiver();
    r.hold();
    const { partner, listed } = await queued(r.url, 2);
    const pass = stack.core.webhooks.runOnce();
    await r.waitFor(1);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: r.url });
    r.release(410);
    await pass;
    await drain();
    expect(await goneAt(partner)).to.equal(null);
    expect(ids(r)).to.deep.equal([listed[0], ...listed]);
    expect(stack.logs.text()).to.include("answered 410 Gone but was set again since");
  });

  it("many partners' same URLs set again, all at once, while their 410s are held: none is paused, every event goes", async () => {
    const set = [];
    for (let i = 0; i < 8; i++) {
      const r = await receiver();
      r.hold();
      set.push({ r, ...(await queued(r.url, 1)) });
    }
    const pass = stack.core.webhooks.runOnce();
    await Promise.all(set.map((s) => s.r.waitFor(1)));
    await Promise.all(set.map((s) => stack.admin.partnerResources.setWebhook({ clientId: s.partner.clientId, url: s.r.url })));
    for (const s of set) s.r.release(410);
    await pass;
    await drain();
    for (const s of set) {
      expect(await goneAt(s.partner), s.partner.clientId).to.equal(null);
      expect(ids(s.r)).to.deep.equal([s.listed[0], s.listed[0]]);
    }
  });
});
