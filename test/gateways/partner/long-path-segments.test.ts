import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Outcome } from "../../../gen/vaultgate/audit/v1/audit_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import type { TestPartner } from "../../support/partners.js";
import { api, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { partnerWithPayee } from "../../support/treasury.js";
import { atOnceOnPostgres } from "../../support/db.js";

/**
 * A long path segment is a request-shape problem like any other: the caller's checks come
 * first (a forged or missing bearer is told 401), then the route names the field, audited.
 */
describe("partner API: a long path segment is refused by the route, after the caller's checks", () => {
  let stack: TestStack;
  let partner: TestPartner;
  let token: string;
  let userId: string;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    ({ partner, userId, token } = await partnerWithPayee(stack, { scopes: ["kyc:read"] }));
  });
  after(() => stack.close());

  const message = (res: ApiResponse) => (res.body as { error: { message: string } }).error.message;
  const auditRows = async () => Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n);
  const auditOf = async (res: ApiResponse) => {
    const { records } = await stack.admin.audit.listRecords({ requestId: res.headers.get("x-request-id")!, limit: 10 });
    return records.map((r) => [r.action, r.outcome, r.reason, r.actor]);
  };

  /** [path, the message a valid caller gets, the audited action]. */
  const cases = (n: number): [string, RegExp, string][] => [
    [`/users/${"u".repeat(n)}/kyc`, /^user id must be a UUID$/, "partner.kyc.read"],
    [`/users/${"u".repeat(n)}/payouts/po-1`, /^user id must be a UUID$/, "partner.payouts.read"],
    [`/users/${userId}/payouts/${"p".repeat(n)}`, /^payout_id .*\b128\b/, "partner.payouts.read"],
  ];

  it("without a bearer, or with a forged or tampered one, a 3000-character segment is 401 invalid_token and writes no audit row", async () => {
    const tampered = token.slice(0, -4) + (token.endsWith("AAAA") ? "BBBB" : "AAAA");
    const before = await auditRows();
    for (const [path] of cases(3000)) {
      const none = await api(stack, "GET", path);
      expectHttpError(none, 401, "invalid_token");
      expect(none.headers.get("www-authenticate")).to.equal("Bearer");
      for (const bad of ["forged.token.value", tampered]) {
        const res = await api(stack, "GET", path, { token: bad });
        expectHttpError(res, 401, "invalid_token");
        expect(res.headers.get("www-authenticate")).to.equal('Bearer error="invalid_token"');
      }
    }
    expect(await auditRows()).to.equal(before);
  });

  for (const n of [257, 3000, 12_000]) {
    it(`a valid caller with a ${n}-character segment gets 400 invalid_request naming the field, audited as a failure`, async () => {
      for (const [path, expected, action] of cases(n)) {
        const res = await api(stack, "GET", path, { token });
        expectHttpError(res, 400, "invalid_request");
        expect(message(res), path.slice(0, 60)).to.match(expected);
        expect(await auditOf(res), path.slice(0, 60)).to.deep.equal([[action, Outcome.FAILURE, "invalid_request", `partner:${partner.clientId}`]]);
      }
    });
  }

  it("a mix of long-path requests from valid and forged callers (concurrently on PostgreSQL) audits exactly the valid ones", async () => {
    const before = await auditRows();
    const send = (i: number) => api(stack, "GET", cases(400 + i)[i % 3]![0], { token: i % 2 ? "forged.token.value" : token });
    const indexes = Array.from({ length: 30 }, (_, i) => i);
    const answers = await atOnceOnPostgres(indexes, send);
    answers.forEach((res, i) => {
      if (i % 2) expectHttpError(res, 401, "invalid_token");
      else expectHttpError(res, 400, "invalid_request");
    });
    expect(await auditRows()).to.equal(before + 15);
  });

  it("a URL beyond the server's request-header limit is refused with a 4xx, never a 5xx", async () => {
    for (const path of [`/users/${"u".repeat(20_000)}/kyc`, `/users/${randomUUID()}/payouts/${"p".repeat(70_000)}`]) {
      for (const bearer of [undefined, token]) {
        const res = await api(stack, "GET", path, { token: bearer });
        expect(res.status, res.text.slice(0, 100)).to.be.within(400, 499);
      }
    }
    // The server still answers normally afterwards.
    expect((await api(stack, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
  });
});
