import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";

/**
 * A webhook URL is kept as the operator wrote it (an IPv6 literal in any spelling too) and delivered to the
 * address it names. Plain http is taken for [::1] only, so the delivery here is to `HTTP://[::1]`.
 */
describe("webhook URL with an IPv6 literal host", function () {
  this.timeout(60_000);
  let stack: TestStack;
  const received: IncomingHttpHeaders[] = [];
  const path = `/hooks/${randomBytes(6).toString("hex")}`;
  const server = createServer((req, res) => {
    if (req.url === path) received.push(req.headers);
    res.statusCode = req.url === path ? 204 : 404;
    req.resume().on("end", () => res.end());
  });
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
    await new Promise<void>((resolve) => server.listen(0, "::1", resolve));
  });
  after(async () => {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await stack?.close();
  });

  it("is read back as written by SetWebhook, GetPartner and CreatePartner, and its events reach the address it names", async () => {
    const { port } = server.address() as AddressInfo;
    const v6 = "https://[2001:DB8:0:0:0:0:0:7]:8443/x";
    const partner = await createPartner(stack);
    expect((await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: v6 })).url).to.equal(v6);
    expect((await stack.admin.partners.getPartner({ clientId: partner.clientId })).partner?.webhookUrl).to.equal(v6);

    const written = `HTTP://[::1]:${port}${path}`;
    const set = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: written });
    expect(set.url).to.equal(written);
    expect((await stack.admin.partners.getPartner({ clientId: partner.clientId })).partner?.webhookUrl).to.equal(written);
    const made = await stack.admin.partners.createPartner({ name: "IPv6 partner", slug: `v6-${randomBytes(4).toString("hex")}`, webhookUrl: written });
    expect(made.partner?.webhookUrl).to.equal(written);
    expect((await stack.admin.partners.getPartner({ clientId: made.partner!.clientId })).partner?.webhookUrl).to.equal(written);

    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 3n });
    while ((await stack.core.webhooks.runOnce()) > 0);
    expect(received).to.have.length(1);
    expect(received[0]!["webhook-id"]).to.be.a("string");
  });
});
