import { expect } from "chai";
import { Outcome } from "../../../gen/vaultgate/audit/v1/audit_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken, type TestPartner } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";

/**
 * A refusal after the access checks passed (the e-mail, paging input, the KYC provider) is
 * audited like the checks' own, under the request id of the answer.
 */
describe("partner resource refusals after the access checks are audited", () => {
  let stack: TestStack;
  let auditBroken = false;
  let partner: TestPartner;
  let token: string;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0, auditFaults: { appendFault: () => (auditBroken ? new Error("disk full") : undefined) } });
    partner = await createPartner(stack);
    token = await mintPartnerToken(stack, partner);
  });
  after(() => stack.close());
  afterEach(() => {
    auditBroken = false;
  });

  /** The audit rows of an answer, as [action, outcome, reason, actor]. */
  async function auditOf(res: ApiResponse) {
    const { records } = await stack.admin.audit.listRecords({ requestId: res.headers.get("x-request-id")!, limit: 10 });
    return records.map((r) => [r.action, r.outcome, r.reason, r.actor]);
  }
  const failure = (action: string, reason: string) => [[action, Outcome.FAILURE, reason, `partner:${partner.clientId}`]];

  it("an e-mail core refuses, a bad cursor or watermark, and a KYC provider refusal each leave a failure row", async () => {
    const email = await api(stack, "POST", "/users", { token, json: { email: "not-an-address" } });
    expectHttpError(email, 400, "invalid_request");
    expect(await auditOf(email)).to.deep.equal(failure("partner.users.create", "invalid_request"));

    const { userId } = await createUserFor(stack, partner);
    const transfers = await api(stack, "GET", `/users/${userId}/transfers?cursor=garbage`, { token });
    expectHttpError(transfers, 400, "invalid_cursor");
    expect(await auditOf(transfers)).to.deep.equal(failure("partner.transfers.read", "invalid_cursor"));
    const events = await api(stack, "GET", "/events?since=garbage", { token });
    expectHttpError(events, 400, "invalid_request");
    expect(await auditOf(events)).to.deep.equal(failure("partner.events.read", "invalid_request"));

    const unknown = await api(stack, "POST", `/users/${userId}/kyc/link`, { token, json: { provider: "nope" } });
    expectHttpError(unknown, 400, "invalid_request");
    expect(await auditOf(unknown)).to.deep.equal(failure("partner.kyc.link", "invalid_request"));
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "acme-id" });
    const conflict = await api(stack, "POST", `/users/${userId}/kyc/link`, { token, json: {} });
    expectHttpError(conflict, 409, "kyc_provider_conflict");
    expect(await auditOf(conflict)).to.deep.equal(failure("partner.kyc.link", "kyc_provider_conflict"));
  });

  it("a refusal whose failure row cannot be written answers 503 audit_unavailable, and a success still writes one row", async () => {
    const { userId } = await createUserFor(stack, partner);
    await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "acme-id" });
    auditBroken = true;
    expectHttpError(await api(stack, "POST", `/users/${userId}/kyc/link`, { token, json: {} }), 503, "audit_unavailable");
    auditBroken = false;
    const fresh = await createUserFor(stack, partner);
    const link = await api(stack, "POST", `/users/${fresh.userId}/kyc/link`, { token, json: {} });
    expect(link.status, link.text).to.equal(201);
    expect(await auditOf(link)).to.deep.equal([["partner.kyc.link", Outcome.SUCCESS, "", `partner:${partner.clientId}`]]);
  });
});
