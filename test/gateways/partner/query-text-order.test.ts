import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { bindTreasury } from "../../support/treasury.js";

/**
 * A NUL in the query string or the path is a request-shape problem like any other: a forged
 * or expired token is told 401 first (so the client mints again rather than "fixing" the
 * query), and a valid caller's 400 is audited like the other shape refusals.
 */
describe("partner API: NUL in the query or path comes after the caller's checks", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack.close());

  async function setup() {
    const partner = await createPartner(stack, { entitlements: ["kyc:read", "transfers:read", "payouts:receive", "treasury:write"] });
    await bindTreasury(stack.admin, partner);
    const { userId } = await createUserFor(stack, partner, ["kyc:read", "transfers:read", "payouts:receive"]);
    return { token: await mintPartnerToken(stack, partner), userId };
  }

  const paths = (userId: string) => [
    `/events?limit=1%00`,
    `/events?a%00b=1`,
    `/users/${userId}/transfers?cursor=a%00b`,
    `/users/${userId}/kyc?x=%00`,
    `/users/%00/kyc`,
    `/treasury?x=%00`,
    `/users/${userId}/payouts/po%00x`,
  ];

  it("a forged token is told 401 invalid_token, whatever the query or path holds", async () => {
    const { userId } = await setup();
    for (const path of paths(userId)) {
      const res = await api(stack, "GET", path, { token: "forged.token.value" });
      expectHttpError(res, 401, "invalid_token");
    }
  });

  it("a valid caller gets 400 invalid_request naming the field, and the refusal is audited", async () => {
    const { token, userId } = await setup();
    for (const path of paths(userId)) {
      const res = await api(stack, "GET", path, { token });
      expectHttpError(res, 400, "invalid_request");
      const requestId = (res.body as { error: { request_id: string } }).error.request_id;
      const { records } = await stack.admin.audit.listRecords({ requestId, limit: 10 });
      const reasons = records.map((r) => r.reason);
      expect(reasons, path).to.deep.equal(["invalid_request"]);
    }
  });
});
