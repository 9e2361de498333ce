import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import type { TestPartner } from "../../support/partners.js";
import { api, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { partnerWithPayee } from "../../support/treasury.js";
import { atOnceOnPostgres } from "../../support/db.js";

/**
 * A NUL or lone surrogate in a JSON body is a request-shape problem, as in the query or path:
 * a missing, forged or tampered bearer is told 401 first, and a valid caller's 400 names the
 * field and is audited like the other shape refusals; nothing is paid.
 */
describe("partner API: NUL in a JSON body comes after the caller's checks", () => {
  let stack: TestStack;
  let partner: TestPartner;
  let token: string;
  let payer: string;
  let userId: string;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    ({ partner, payer, userId, token } = await partnerWithPayee(stack, { balanceCents: 10_000n, scopes: ["kyc:read"] }));
  });
  after(() => stack.close());

  const item = (reference: string) => ({
    execution_id: `ex-${randomUUID()}`,
    payout_id: `po-${randomUUID()}`,
    recipient: { user_id: userId },
    amount_cents: 100,
    currency: "USD",
    reference,
  });
  /** [path, body, the message a valid caller gets]. */
  const cases = (): [string, unknown, string][] => [
    ["/users", { email: "a\u0000b@example.com" }, "email must not contain NUL characters"],
    ["/users", { "e\u0000mail": "a@example.com" }, "the body has a field name that must not contain NUL characters"],
    [`/users/${userId}/kyc/link`, { provider: "a\ud800b" }, "provider must be valid Unicode text (it holds an unpaired surrogate)"],
    ["/treasury/payouts", { payer_entity_id: payer, items: [item("a\u0000b")] }, "items[0].reference must not contain NUL characters"],
  ];
  const send = (path: string, json: unknown, bearer?: string) =>
    api(stack, "POST", path, { token: bearer, json, headers: { "idempotency-key": `k-${randomUUID()}` } });
  const message = (res: ApiResponse) => (res.body as { error: { message: string } }).error.message;
  const auditRows = async () => Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n);
  const moneyMoved = async () => Number((await stack.core.db("treasury_executions").where({ partner_id: partner.partnerId }).count({ n: "*" }))[0]!.n);

  it("without a bearer, or with a forged or tampered one, the answer is 401 invalid_token", async () => {
    const tampered = token.slice(0, -4) + (token.endsWith("AAAA") ? "BBBB" : "AAAA");
    for (const [path, json] of cases()) {
      for (const bearer of [undefined, "forged.token.value", tampered]) {
        expectHttpError(await send(path, json, bearer), 401, "invalid_token");
      }
    }
    expect(await moneyMoved()).to.equal(0);
  });

  it("a valid caller gets 400 invalid_request naming the field, audited, and nothing is paid", async () => {
    for (const [path, json, expected] of cases()) {
      const res = await send(path, json, token);
      expectHttpError(res, 400, "invalid_request");
      expect(message(res), path).to.equal(expected);
      const { records } = await stack.admin.audit.listRecords({ requestId: res.headers.get("x-request-id")!, limit: 10 });
      expect(
        records.map((r) => [r.reason, r.actor]),
        path,
      ).to.deep.equal([["invalid_request", `partner:${partner.clientId}`]]);
    }
    expect(await moneyMoved()).to.equal(0);
  });

  it("valid and forged callers sending such bodies (concurrently on PostgreSQL) are each answered in order; only the valid are audited", async () => {
    const before = await auditRows();
    const all = Array.from({ length: 24 }, (_, i) => i);
    const one = (i: number) => {
      const [path, json] = cases()[i % 4]!;
      return send(path, json, i % 2 ? "forged.token.value" : token);
    };
    const answers = await atOnceOnPostgres(all, one);
    answers.forEach((res, i) => {
      if (i % 2) expectHttpError(res, 401, "invalid_token");
      else expectHttpError(res, 400, "invalid_request");
    });
    expect(await auditRows()).to.equal(before + 12);
    expect(await moneyMoved()).to.equal(0);
  });
});
