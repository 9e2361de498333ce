import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * A partner calling core directly sends its user_id unchecked by any gateway: one that is no UUID is a
 * problem of the request's shape, judged after the partner's state and rate limit like every other.
 */
describe("PartnerResourcesService: a user_id that is no UUID, from a direct caller", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0, resourceRateLimits: { default: 3 } });
  });
  after(() => stack.close());

  async function partnerWithToken() {
    const partner = await createPartner(stack);
    const { accessToken } = await stack.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret });
    return { partner, accessToken };
  }

  it("hostile: counts against the rate limit, so a flood of them is refused rate_limited", async () => {
    const { accessToken } = await partnerWithToken();
    const rpc = stack.clients.partnerResources;
    for (let i = 0; i < 3; i++) await expectRefused(rpc.getKycStatus({ accessToken, userId: `not-a-uuid-${i}` }), Reason.INVALID_REQUEST);
    await expectRefused(rpc.getKycStatus({ accessToken, userId: "not-a-uuid" }), Reason.RATE_LIMITED);
  });

  it("hostile: a suspended partner's token is told partner_inactive, whatever its user_id", async () => {
    const { partner, accessToken } = await partnerWithToken();
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    await expectRefused(stack.clients.partnerResources.listWallets({ accessToken, userId: "not-a-uuid" }), Reason.PARTNER_INACTIVE);
  });

  it("hostile to the audit trail: the refusal is recorded under the partner, with an empty subject, never the text sent", async () => {
    const { partner, accessToken } = await partnerWithToken();
    const rpc = stack.clients.partnerResources;
    const sent = `x${"y".repeat(100_000)}`;
    await expectRefused(rpc.getUsAccount({ accessToken, userId: sent }), Reason.INVALID_REQUEST);
    await expectRefused(rpc.getUsAccount({ accessToken, userId: sent, requestProblem: "limit must be 1 to 100" }), Reason.INVALID_REQUEST);
    await expectRefused(rpc.getUsAccount({ accessToken, userId: "not-a-uuid" }), Reason.INVALID_REQUEST);
    const rows = await stack.core.db("audit_records").where({ actor: `partner:${partner.clientId}`, action: "partner.us_account.read" });
    expect(rows.map((r) => [r.outcome, r.reason, r.subject])).to.deep.equal(Array(3).fill(["failure", "invalid_request", ""]));
  });
});
