import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, type TestPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { startDnsServer, type TestDnsServer } from "../../support/dns-server.js";
import { requirePostgres } from "../../support/db.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";

type Receiver = Awaited<ReturnType<typeof startWebhookReceiver>>;

/**
 * A delivery already leased when its user is deactivated (or its partner suspended) is re-checked
 * just before the request is written: it never leaves, and the log says why.
 */
describe("webhook deliveries in flight", function () {
  this.timeout(60_000);
  const closers: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of closers.reverse()) await c();
  });

  /** A partner whose receiver is named through a name server that holds its answers: the worker waits after its lease. */
  async function leasedAndWaiting() {
    const dns = await startDnsServer({ "hooks.vaultgate.test": "127.0.0.1" }, { hold: true });
    const stack = await startStack({ webhookPollMs: 0, hostResolver: { servers: [dns.address], timeoutMs: 20_000 } });
    const receiver = await startWebhookReceiver();
    closers.push(
      () => dns.close(),
      () => stack.close(),
      () => receiver.close(),
    );
    const partner = await createPartner(stack);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    await stack.core
      .db("partners")
      .where({ id: partner.partnerId })
      .update({ webhook_url: receiver.url.replace("127.0.0.1", "hooks.vaultgate.test") });
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending", provider: "sandbox" });
    const pass = stack.core.webhooks.runOnce();
    await until(dns, "hooks.vaultgate.test");
    return { dns, stack, receiver, partner, userId, pass };
  }

  async function until(dns: TestDnsServer, name: string) {
    while (!dns.queries.some((q) => q.name === name)) await new Promise((r) => setTimeout(r, 10));
  }

  // The database is shared with other tests' partners: a pass's attempt count includes theirs, so only this test's count.
  const drain = async (stack: TestStack) => {
    while ((await stack.core.webhooks.runOnce()) > 0);
  };

  const events = async (stack: TestStack, partner: TestPartner) =>
    (await stack.core.db.raw(`SELECT delivery_state, attempts FROM partner_events WHERE partner_id = ?`, [partner.partnerId])).rows as unknown[];

  it("hostile to the user: a user deactivated while their event is leased is never sent to a real receiver, and the log names the deactivation", async () => {
    const { dns, stack, receiver, partner, userId, pass } = await leasedAndWaiting();
    const [{ id: eventId }] = (await stack.core.db.raw(`SELECT id FROM partner_events WHERE partner_id = ?`, [partner.partnerId])).rows;
    await stack.admin.partnerResources.setUserStatus({ userId, status: "inactive" });
    dns.release();
    await pass;
    expect(receiver.received).to.deep.equal([]);
    expect(await events(stack, partner)).to.deep.equal([]);
    const notSent = stack.logs
      .text()
      .split("\n")
      .filter((l) => l.includes(eventId));
    expect(notSent, "the log lines of this event").to.have.length(1);
    expect(notSent[0]).to.include("webhook not sent: its user was deactivated");
    expect(stack.logs.text()).to.not.match(/lease/);
  });

  it("a partner suspended while an event is leased sends nothing, and the event waits, its attempt given back, until reactivation", async () => {
    const { dns, stack, receiver, partner, pass } = await leasedAndWaiting();
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    dns.release();
    await pass;
    expect(receiver.received).to.deep.equal([]);
    expect(await events(stack, partner)).to.deep.equal([{ delivery_state: "pending", attempts: 0 }]);
    expect(stack.logs.text()).to.include("webhook not sent: the partner was suspended");
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
    await drain(stack);
    expect(receiver.received).to.have.length(1);
    expect(await events(stack, partner)).to.deep.equal([{ delivery_state: "delivered", attempts: 1 }]);
  });

  it("a webhook URL changed while an event is leased sends nothing to the old receiver; the event goes to the new one, its attempt given back", async () => {
    const { dns, stack, receiver, partner, pass } = await leasedAndWaiting();
    const moved = await startWebhookReceiver();
    closers.push(() => moved.close());
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: moved.url });
    dns.release();
    await pass;
    expect(receiver.received).to.deep.equal([]);
    expect(stack.logs.text()).to.include("had its webhook set again meanwhile");
    expect(moved.received).to.have.length(1);
    expect(await events(stack, partner)).to.deep.equal([{ delivery_state: "delivered", attempts: 1 }]);
  });

  it("a webhook URL removed while an event is leased sends nothing; the event waits for a URL", async () => {
    const { dns, stack, receiver, partner, pass } = await leasedAndWaiting();
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: "" });
    dns.release();
    await pass;
    expect(receiver.received).to.deep.equal([]);
    await drain(stack);
    expect(receiver.received).to.deep.equal([]);
    expect(await events(stack, partner)).to.deep.equal([{ delivery_state: "pending", attempts: 0 }]);
  });

  it("PostgreSQL only: deliveries racing deactivations send nothing of a user once the deactivation has committed", async function () {
    requirePostgres(this, "deliveries and deactivations on several connections");
    const stack = await startStack({ webhookPollMs: 0 });
    closers.push(() => stack.close());
    const receivers: Receiver[] = [];
    const partners: TestPartner[] = [];
    for (let i = 0; i < 6; i++) {
      const receiver = await startWebhookReceiver();
      closers.push(() => receiver.close());
      const partner = await createPartner(stack);
      await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
      receivers.push(receiver);
      partners.push(partner);
    }
    const users = await Promise.all(Array.from({ length: 8 }, () => createUserFor(stack).then((u) => u.userId)));
    for (const u of users) for (const p of partners) await stack.admin.partnerResources.grantConsent({ clientId: p.clientId, userId: u });
    for (const u of users)
      for (const status of ["pending", "approved"]) await stack.admin.partnerResources.setKycStatus({ userId: u, status, provider: "sandbox" });
    const sentFor = (u: string) => receivers.reduce((n, r) => n + r.received.filter((w) => w.body.includes(u)).length, 0);
    const atCommit = new Map<string, number>();
    const deactivated = users.slice(0, 4);
    await Promise.all([
      stack.core.webhooks.runOnce(),
      stack.core.webhooks.runOnce(),
      ...deactivated.map(async (u) => {
        await stack.admin.partnerResources.setUserStatus({ userId: u, status: "inactive" });
        atCommit.set(u, sentFor(u));
      }),
    ]);
    while ((await stack.core.webhooks.runOnce()) > 0);
    for (const u of deactivated) expect(sentFor(u), u).to.equal(atCommit.get(u));
    for (const u of users.slice(4)) expect(sentFor(u), u).to.equal(partners.length * 2);
    expect(stack.logs.text()).to.not.match(/lease/);
  });
});
