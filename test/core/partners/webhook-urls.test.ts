import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { expectRefused } from "../../support/refusals.js";

/** A webhook URL is taken only as it will be sent: the spelling rule the OpenAPI document publishes. */
describe("PartnersService SetWebhook URL spellings", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
  });
  after(() => stack.close());

  it("refuses spellings a URL parser forgives, and takes the written forms", async () => {
    const { clientId } = await createPartner(stack);
    for (const url of [
      "https:hooks.example/x",
      "https:/hooks.example/x",
      "http://127.1:9/x",
      "https://hooks.example\\@evil.example/",
      "http://localhost.evil.example/",
      // Hosts the parser reads as 127.0.0.1, and characters it drops: stored, they would not be what was written.
      "https://127.1/x",
      "https://2130706433/x",
      "https://0x7f.0.0.1/x",
      "https://0177.0.0.1/x",
      "https://1.2.3.4./x",
      "https://%30x7f.1/x",
      "https://hooks%2eexample/x",
      "https://\uff11\uff12\uff17.0.0.1/x",
      "https://hoo\tks.example/x",
      "https://hooks.example/a\nb",
      "https://hooks.example/x\r",
      "https://hooks.example/x ",
    ]) {
      const refusal = await expectRefused(() => stack.admin.partnerResources.setWebhook({ clientId, url }), Reason.INVALID_REQUEST);
      expect(refusal.message, url).to.match(/url must be/);
    }
    for (const url of [
      "HTTPS://Hooks.example/x",
      "http://localhost:9/x",
      "http://[::1]:9/x",
      "https://203.0.113.7:8443/x",
      "https://1.2.3.4/x",
      "https://a.b/c d",
      "HTTP://[::1]:9/x",
      "https://[2001:DB8:0:0:0:0:0:7]/x",
    ]) {
      const { secret, url: stored } = await stack.admin.partnerResources.setWebhook({ clientId, url });
      expect(secret, url).to.match(/^whsec_/);
      expect(stored, url).to.equal(url);
    }
  });
  it("refuses port 0, which no receiver listens on, instead of failing every delivery", async () => {
    const { clientId } = await createPartner(stack);
    for (const url of ["https://hooks.example:0/x", "https://hooks.example:000", "https://203.0.113.7:0/", "http://127.0.0.1:0/x", "http://[::1]:0/x"]) {
      const refusal = await expectRefused(() => stack.admin.partnerResources.setWebhook({ clientId, url }), Reason.INVALID_REQUEST);
      expect(refusal.message, url).to.equal("url must name a port from 1 to 65535");
    }
    const { url } = await stack.admin.partnerResources.setWebhook({ clientId, url: "https://hooks.example:1/x" });
    expect(url).to.equal("https://hooks.example:1/x");
  });
});
