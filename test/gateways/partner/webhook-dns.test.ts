import { expect } from "chai";
import { Webhook } from "standardwebhooks";
import { startStack, type StackOptions, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { startDnsServer, type TestDnsServer } from "../../support/dns-server.js";
import { pkce } from "../../support/agent-oauth.js";

/**
 * Receiver host names go through core's bounded resolver and the request goes to the address it
 * gave; a silent name server costs a failed attempt, retried later, never a stuck worker.
 */
describe("webhook delivery: receiver host names (real name server)", function () {
  this.timeout(30_000);
  const closers: (() => Promise<void>)[] = [];
  after(async () => {
    for (const c of closers.reverse()) await c();
  });

  async function setUp(dns: TestDnsServer, options: StackOptions = {}) {
    const stack: TestStack = await startStack({ webhookPollMs: 0, hostResolver: { servers: [dns.address], timeoutMs: 1000 }, ...options });
    closers.push(() => stack.close());
    const receiver = await startWebhookReceiver();
    closers.push(() => receiver.close());
    const partner = await createPartner(stack, { webhookUrl: receiver.url });
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    // The same receiver, named (the operator surface takes http only on loopback names).
    const named = receiver.url.replace("127.0.0.1", "hooks.vaultgate.test");
    await stack.core.db("partners").where({ id: partner.partnerId }).update({ webhook_url: named });
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 7n });
    return { stack, receiver, partner, secret };
  }

  // The database is shared with other tests' partners: a pass's attempt count includes theirs, so only this test's count.
  const drain = async (stack: TestStack) => {
    while ((await stack.core.webhooks.runOnce()) > 0);
  };

  it("resolves the receiver's name with the configured name server and delivers to that address", async () => {
    const dns = await startDnsServer({ "hooks.vaultgate.test": "127.0.0.1" });
    closers.push(() => dns.close());
    const { stack, receiver, secret } = await setUp(dns);
    await drain(stack);
    expect(receiver.received).to.have.length(1);
    expect(dns.queries.map((q) => q.name)).to.include("hooks.vaultgate.test");
    const wh = new Webhook(secret);
    expect(
      (wh.verify(receiver.received[0]!.body, receiver.received[0]!.headers as Record<string, string>) as { data: { amount_cents: number } }).data.amount_cents,
    ).to.equal(7);
  });

  it("a silent name server: the attempt fails within the lookup's limit and is retried later", async () => {
    const dns = await startDnsServer({}, { hold: true });
    closers.push(() => dns.close());
    const { stack, receiver, partner } = await setUp(dns);
    await drain(stack);
    expect(receiver.received).to.have.length(0);
    const { rows } = await stack.core.db.raw(`SELECT delivery_state, attempts, last_error FROM partner_events WHERE partner_id = ?`, [partner.partnerId]);
    expect(rows).to.deep.equal([{ delivery_state: "pending", attempts: 1, last_error: "HostLookupError" }]);
  });

  it("a receiver host that is not public (a name resolving to loopback, a loopback literal) is never contacted", async () => {
    const dns = await startDnsServer({ "hooks.vaultgate.test": "127.0.0.1" });
    closers.push(() => dns.close());
    const { stack, receiver, partner } = await setUp(dns, { webhookAllowPrivate: false });
    const state = async () =>
      (await stack.core.db.raw(`SELECT delivery_state, attempts, last_error FROM partner_events WHERE partner_id = ?`, [partner.partnerId])).rows;
    await stack.core.webhooks.runOnce();
    expect(await state()).to.deep.equal([{ delivery_state: "pending", attempts: 1, last_error: "NonPublicAddressError" }]);
    // The operator's loopback URL itself, on the retry.
    await stack.core.db("partners").where({ id: partner.partnerId }).update({ webhook_url: receiver.url });
    stack.clock.advance(30_000);
    await stack.core.webhooks.runOnce();
    expect(await state()).to.deep.equal([{ delivery_state: "pending", attempts: 2, last_error: "NonPublicAddressError" }]);
    expect(receiver.received).to.have.length(0);
  });

  it("hostile: client metadata lookups holding every shared lookup slot do not fail a delivery", async () => {
    const dns = await startDnsServer({ "hooks.vaultgate.test": "127.0.0.1" }, { hold: true });
    closers.push(() => dns.close());
    const hostResolver = { servers: [dns.address], timeoutMs: 20_000, maxConcurrent: 2 };
    const { stack, receiver, partner } = await setUp(dns, { gateway: true, hostResolver });
    // Anyone can make core look up a client_id's host: two names the name server sits on.
    const authorize = (host: string) =>
      fetch(
        `${stack.url}/oauth2/authorize?${new URLSearchParams({
          response_type: "code",
          client_id: `https://${host}/client.json`,
          redirect_uri: "https://attacker.example/cb",
          code_challenge: pkce().challenge,
          code_challenge_method: "S256",
        })}`,
        { redirect: "manual" },
      );
    const flood = ["a.attacker.test", "b.attacker.test"].map(authorize);
    const asked = (name: string) => dns.queries.some((q) => q.name === name);
    while (!asked("a.attacker.test") || !asked("b.attacker.test")) await new Promise((r) => setTimeout(r, 10));
    let done = false;
    const pass = stack.core.webhooks.runOnce().finally(() => {
      done = true;
    });
    while (!done && !asked("hooks.vaultgate.test")) await new Promise((r) => setTimeout(r, 10));
    dns.release();
    await pass;
    await Promise.all(flood);
    const { rows } = await stack.core.db.raw(`SELECT delivery_state, attempts, last_error FROM partner_events WHERE partner_id = ?`, [partner.partnerId]);
    expect(rows).to.deep.equal([{ delivery_state: "delivered", attempts: 1, last_error: null }]);
    expect(receiver.received).to.have.length(1);
  });
});
