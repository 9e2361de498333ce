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
    ]) {
      const refusal = await expectRefused(() => stack.admin.partnerResources.setWebhook({ clientId, url }), Reason.INVALID_REQUEST);
      expect(refusal.message, url).to.match(/url must be/);
    }
    for (const url of ["HTTPS://Hooks.example/x", "http://localhost:9/x", "http://[::1]:9/x"]) {
      const { secret } = await stack.admin.partnerResources.setWebhook({ clientId, url });
      expect(secret, url).to.match(/^whsec_/);
    }
  });
});
