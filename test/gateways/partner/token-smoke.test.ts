import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";

describe("partner token endpoint (smoke)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  it("mints a token for a fresh partner", async () => {
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    expect(token.split(".")).to.have.length(3);
  });
});
