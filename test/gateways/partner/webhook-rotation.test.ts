import { expect } from "chai";
import { Webhook } from "standardwebhooks";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver, type ReceivedWebhook } from "../../support/webhook-receiver.js";
import { requirePostgres } from "../../support/db.js";
import { thrownBy } from "../../support/refusals.js";

const HOUR = 3600_000;

/**
 * A rotated webhook secret still signs for 24 hours beside the new one. The receiver verifies with the
 * standardwebhooks package, which checks the timestamp against the real time: the clock is set so each
 * delivery falls within its 5 minutes, the rotation 24 hours before the end of the test.
 */
describe("partner webhook secret rotation", () => {
  let stack: TestStack;
  let receiver: Awaited<ReturnType<typeof startWebhookReceiver>>;
  let answer = 204;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
    receiver = await startWebhookReceiver(() => answer);
  });
  after(async () => {
    await stack.close();
    await receiver.close();
  });

  const verifies = (secret: string, r: ReceivedWebhook) => {
    try {
      new Webhook(secret).verify(r.body, r.headers as Record<string, string>);
      return true;
    } catch {
      return false;
    }
  };
  const last = (userId: string) => receiver.received.filter((r) => r.body.includes(userId)).at(-1)!;
  const stored = async (partnerId: string) =>
    (await stack.core.db("partners").where({ id: partnerId }).first("webhook_secret_prev_enc", "webhook_secret_prev_until")) as {
      webhook_secret_prev_enc: string | null;
      webhook_secret_prev_until: Date | null;
    };

  it("signs with the previous and the new secret during the overlap, a retry queued before the rotation included, then with the new one only", async () => {
    const realNow = Date.now();
    stack.clock.set(new Date(realNow - 24 * HOUR + 2 * 60_000));
    const partner = await createPartner(stack);
    const { secret: old } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const { userId } = await createUserFor(stack, partner);
    answer = 500;
    await stack.admin.partnerResources.setKycStatus({ userId, status: "pending", provider: "sandbox" });
    await stack.core.webhooks.runOnce(); // refused: the event waits for a retry
    const { secret: fresh } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    expect(fresh).to.not.equal(old);
    const kept = await stored(partner.partnerId);
    expect(kept.webhook_secret_prev_enc).to.be.a("string").and.not.include(old.slice(6));

    // 23 h 57 min after the rotation: the retry and a new event verify with either secret.
    answer = 204;
    stack.clock.set(new Date(realNow - 60_000));
    await stack.core.webhooks.runOnce();
    const retried = last(userId);
    expect(JSON.parse(retried.body)).to.deep.include({ type: "kyc.status_changed" });
    expect(String(retried.headers["webhook-signature"]).split(" ")).to.have.length(2);
    expect([verifies(old, retried), verifies(fresh, retried)]).to.deep.equal([true, true]);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    expect([verifies(old, last(userId)), verifies(fresh, last(userId))]).to.deep.equal([true, true]);

    // 24 h 1 min after: the new secret only, and the pruner forgets the old one.
    stack.clock.set(new Date(realNow + 3 * 60_000));
    await stack.admin.partnerResources.setKycStatus({ userId, status: "rejected", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    const after = last(userId);
    expect(JSON.parse(after.body)).to.deep.include({ type: "kyc.status_changed" });
    expect(String(after.headers["webhook-signature"]).split(" ")).to.have.length(1);
    expect(verifies(fresh, after)).to.equal(true);
    expect(String(await thrownBy(() => new Webhook(old).verify(after.body, after.headers as Record<string, string>)))).to.match(/signature/i);
    expect((await stored(partner.partnerId)).webhook_secret_prev_enc).to.equal(kept.webhook_secret_prev_enc);
    await stack.core.prune();
    expect(await stored(partner.partnerId)).to.deep.equal({ webhook_secret_prev_enc: null, webhook_secret_prev_until: null });
  });

  it("hostile to a stale receiver: only the secret before the latest rotation still verifies; the same secret set again keeps the overlap; a removed URL forgets both", async () => {
    stack.clock.set(new Date());
    const partner = await createPartner(stack);
    const { secret: first } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const { secret: second } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const { secret: third } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url, secret: "" });
    const before = await stored(partner.partnerId);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url, secret: third });
    expect(await stored(partner.partnerId)).to.deep.equal(before);
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    expect([first, second, third].map((s) => verifies(s, last(userId)))).to.deep.equal([false, true, true]);

    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: "" });
    expect(await stored(partner.partnerId)).to.deep.equal({ webhook_secret_prev_enc: null, webhook_secret_prev_until: null });
  });

  it("PostgreSQL only: many rotations at once leave a pair of the secrets handed out, and deliveries verify with exactly those two", async function () {
    requirePostgres(this, "concurrent rotations need several connections");
    stack.clock.set(new Date());
    const partner = await createPartner(stack);
    await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const rotated = await Promise.all(
      Array.from({ length: 16 }, () => stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url })),
    );
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    await stack.core.webhooks.runOnce();
    expect(rotated.filter((r) => verifies(r.secret, last(userId)))).to.have.length(2);
  });
});
