import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import { Webhook } from "standardwebhooks";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { expectRefused } from "../../support/refusals.js";

describe("partner webhooks", () => {
  const stacks: TestStack[] = [];
  const receivers: Awaited<ReturnType<typeof startWebhookReceiver>>[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
    for (const r of receivers.splice(0)) await r.close();
  });

  async function setup(status: () => number = () => 204, pollMs = 0) {
    const stack = await startStack({ webhookPollMs: pollMs });
    stacks.push(stack);
    const receiver = await startWebhookReceiver(status);
    receivers.push(receiver);
    const partner = await createPartner(stack, { webhookUrl: receiver.url });
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const { userId } = await createUserFor(stack, partner);
    return { stack, receiver, partner, secret, userId };
  }

  const mine = <T extends { body: string }>(received: T[], userId: string): T[] => received.filter((r) => r.body.includes(userId));

  it("delivers outbox events with Standard Webhooks signatures (verified by the standardwebhooks package)", async () => {
    const { stack, receiver, secret, userId } = await setup();
    expect(secret).to.match(/^whsec_/);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 1234n });
    await stack.core.webhooks.runOnce();
    await receiver.waitFor(2);
    const wh = new Webhook(secret);
    const payloads = mine(receiver.received, userId).map(
      (r) => wh.verify(r.body, r.headers as Record<string, string>) as { type: string; data: Record<string, unknown> },
    );
    expect(payloads.map((p) => p.type)).to.deep.equal(["kyc.status_changed", "transfer.settled"]);
    expect(payloads[1]!.data).to.include({ user_id: userId, amount_cents: 1234, currency: "USD", status: "settled" });
    // A wrong secret does not verify.
    const other = new Webhook(`whsec_${Buffer.alloc(32, 7).toString("base64")}`);
    expect(() => other.verify(receiver.received[0]!.body, receiver.received[0]!.headers as Record<string, string>)).to.throw();
    // Delivered once: another pass sends nothing more.
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(2);
  });

  it("CreatePartner with a webhook URL returns its signing secret once, and deliveries start without SetWebhook", async () => {
    const stack = await startStack({ webhookPollMs: 0 });
    stacks.push(stack);
    const receiver = await startWebhookReceiver(() => 204);
    receivers.push(receiver);
    const res = await stack.admin.partners.createPartner({ name: "Hooked at birth", slug: `hb-${Date.now().toString(36)}`, webhookUrl: receiver.url });
    expect(res.webhookSecret).to.match(/^whsec_/);
    const partner = { partnerId: res.partner!.partnerId, clientId: res.partner!.clientId, clientSecret: res.clientSecret };
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    await receiver.waitFor(1);
    const [delivery] = mine(receiver.received, userId);
    expect(new Webhook(res.webhookSecret).verify(delivery!.body, delivery!.headers as Record<string, string>)).to.include({ type: "kyc.status_changed" });
    // Without a URL there is no secret to show.
    expect((await stack.admin.partners.createPartner({ name: "No hook", slug: `nh-${Date.now().toString(36)}` })).webhookSecret).to.equal("");
  });

  it("takes an operator's secret only in padded base64, which strict decoders at the receiver read", async () => {
    const { stack, receiver, partner, userId } = await setup();
    const padded = `whsec_${Buffer.alloc(32, 9).toString("base64")}`; // 44 characters, one "="
    for (const secret of [padded.replace(/=+$/, ""), `${padded}=`, `${padded.slice(0, -2)}B=`]) {
      await expectRefused(
        stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url, secret }),
        Reason.INVALID_REQUEST,
        /padded base64/,
      );
    }
    expect((await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url, secret: padded })).secret).to.equal(padded);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending" });
    await stack.core.webhooks.runOnce();
    await receiver.waitFor(1);
    const [delivery] = mine(receiver.received, userId);
    expect(new Webhook(padded).verify(delivery!.body, delivery!.headers as Record<string, string>)).to.include({ type: "kyc.status_changed" });
  });

  it("refuses a webhook URL carrying credentials: they would never be sent, yet partner lists would print them", async () => {
    const { stack, receiver, partner } = await setup();
    const withCredentials = receiver.url.replace("http://", "http://hook:s3cret@");
    for (const url of [withCredentials, receiver.url.replace("http://", "http://hook@")]) {
      await expectRefused(stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url }), Reason.INVALID_REQUEST, /credentials/);
      await expectRefused(createPartner(stack, { webhookUrl: url }), Reason.INVALID_REQUEST, /credentials/);
    }
    const listed = await stack.admin.partners.listPartners({ limit: 200 });
    expect(JSON.stringify(listed.partners.map((p) => p.webhookUrl))).to.not.include("s3cret");
  });

  it("refuses a webhook URL over 2048 characters, and takes one of exactly 2048", async () => {
    const { stack, receiver, partner } = await setup();
    const padded = (n: number) => `${receiver.url}/${"a".repeat(n - receiver.url.length - 1)}`;
    await expectRefused(stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: padded(2049) }), Reason.INVALID_REQUEST, /at most 2048/);
    await expectRefused(createPartner(stack, { webhookUrl: padded(5000) }), Reason.INVALID_REQUEST, /at most 2048/);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: padded(2048) });
    // The limit holds for the URL as sent: "é" goes as %C3%A9, a space as %20.
    const escaped = (s: string) => `${receiver.url}/${s.repeat(600)}`;
    for (const url of [escaped("é"), escaped("a b")]) {
      expect(url.length).to.be.below(2048);
      await expectRefused(stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url }), Reason.INVALID_REQUEST, /at most 2048/);
      await expectRefused(createPartner(stack, { webhookUrl: url }), Reason.INVALID_REQUEST, /at most 2048/);
    }
  });

  it("retries with exponential backoff on the injected clock", async () => {
    let answer = 500;
    const { stack, receiver, userId, secret } = await setup(() => answer);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending" });
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(1);
    await stack.core.webhooks.runOnce(); // not due yet
    expect(mine(receiver.received, userId)).to.have.length(1);
    stack.clock.advance(30_000); // first retry after 30 s
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(2);
    stack.clock.advance(30_000); // second retry waits 60 s
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(2);
    answer = 200;
    stack.clock.advance(30_000);
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(3);
    stack.clock.advance(3600_000);
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(3);
    const ids = new Set(mine(receiver.received, userId).map((r) => r.headers["webhook-id"]));
    expect(ids.size).to.equal(1); // the same event id on every attempt
    // Every attempt is signed afresh (its own timestamp) and verifies.
    const wh = new Webhook(secret);
    for (const r of mine(receiver.received, userId)) expect(() => wh.verify(r.body, r.headers as Record<string, string>)).to.not.throw();
  });

  it("gives up after 12 attempts with a warn line naming the event and its partner, never the secret", async () => {
    const { stack, receiver, partner, userId, secret } = await setup(() => 503);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending" });
    for (let i = 0; i < 14; i++) {
      await stack.core.webhooks.runOnce();
      stack.clock.advance(6 * 3600_000);
    }
    expect(mine(receiver.received, userId)).to.have.length(12);
    const eventId = mine(receiver.received, userId)[0]!.headers["webhook-id"];
    const gaveUp = stack.logs.lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((e) => e.msg === "webhook delivery given up: the event is marked failed" && e.eventId === eventId);
    expect(gaveUp).to.have.length(1);
    expect(gaveUp[0]).to.include({ level: 40, partnerId: partner.partnerId, attempts: 12, error: "HTTP 503" });
    expect(stack.logs.text()).to.not.include(secret.slice(6));
  });

  it("refuses a secret sent with no URL, leaving the webhook and its secret as they were", async () => {
    const { stack, receiver, partner, userId, secret } = await setup();
    const other = `whsec_${Buffer.alloc(32, 5).toString("base64")}`;
    await expectRefused(
      stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: "", secret: other }),
      Reason.INVALID_REQUEST,
      /a secret needs a url/,
    );
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending" });
    await stack.core.webhooks.runOnce();
    await receiver.waitFor(1);
    const [delivery] = mine(receiver.received, userId);
    expect(new Webhook(secret).verify(delivery!.body, delivery!.headers as Record<string, string>)).to.include({ type: "kyc.status_changed" });
    // Removing without a secret still works.
    expect((await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: "" })).url).to.equal("");
  });

  it("delivers nothing while the partner is suspended and resumes on reactivation", async () => {
    const { stack, receiver, partner, userId } = await setup();
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    await stack.admin.partnerResources.setKycStatus({ userId, status: "rejected" });
    await stack.core.webhooks.runOnce();
    stack.clock.advance(3600_000);
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(0);
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
    await stack.core.webhooks.runOnce();
    expect(mine(receiver.received, userId)).to.have.length(1);
  });

  it("survives a restart: an event written before the process stopped is delivered by the next one", async () => {
    const { stack, receiver, userId, secret } = await setup();
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved" });
    await stack.close();
    stacks.splice(stacks.indexOf(stack), 1);
    const next = await startStack({ webhookPollMs: 0 });
    stacks.push(next);
    await next.core.webhooks.runOnce();
    const got = mine(receiver.received, userId);
    expect(got).to.have.length(1);
    expect(() => new Webhook(secret).verify(got[0]!.body, got[0]!.headers as Record<string, string>)).to.not.throw();
  });

  it("the background worker started by core delivers on its own", async () => {
    const { stack, receiver, userId } = await setup(() => 204, 10);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending" });
    while (mine(receiver.received, userId).length === 0) await receiver.waitFor(receiver.received.length + 1);
    expect(mine(receiver.received, userId)).to.have.length(1);
  });

  it("the secret is stored encrypted, never in plain text", async () => {
    const { stack, partner, secret } = await setup();
    const { rows } = await stack.core.db.raw(`SELECT webhook_secret_enc FROM partners WHERE client_id = ?`, [partner.clientId]);
    const stored = String((rows as { webhook_secret_enc: string }[])[0]!.webhook_secret_enc);
    expect(stored).to.not.include(secret.slice(6, 20));
    expect(stack.logs.text()).to.not.include(secret.slice(6));
  });

  it("hostile: a receiver answering 2xx with an endless body is acknowledged without its body being read", async () => {
    let written = 0;
    let closed: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      closed = resolve;
    });
    const chunk = Buffer.alloc(64 * 1024, 120);
    const endless = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "text/plain" });
      const pump = () => {
        let more = true;
        while (!res.destroyed && more) {
          more = res.write(chunk);
          written += chunk.length;
        }
        if (!res.destroyed) res.once("drain", pump);
      };
      res.on("close", closed);
      pump();
    });
    await new Promise<void>((resolve) => endless.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(endless.address() as AddressInfo).port}/hooks`;
      // A short request timeout: were the body read, it would be read until then.
      const stack = await startStack({ webhookPollMs: 0, webhookDelivery: { timeoutMs: 2_000 } });
      stacks.push(stack);
      const partner = await createPartner(stack, { webhookUrl: url });
      await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url });
      const { userId } = await createUserFor(stack, partner);
      await stack.admin.partnerResources.setKycStatus({ userId, status: "pending" });
      await stack.core.webhooks.runOnce();
      const { rows } = await stack.core.db.raw(`SELECT delivery_state FROM partner_events WHERE partner_id = ?`, [partner.partnerId]);
      expect(rows).to.deep.equal([{ delivery_state: "delivered" }]);
      // Core hung up once it had the status: no more than the sockets' buffers ever left the receiver.
      await done;
      expect(written).to.be.below(64 * 1024 * 1024);
    } finally {
      endless.closeAllConnections();
      await new Promise((resolve) => endless.close(resolve));
    }
  });
});
