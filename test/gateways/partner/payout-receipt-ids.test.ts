import { expect } from "chai";
import { requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";

/**
 * A receipt path's payout id follows the rule every payout id was written under (the served
 * OpenAPI document's pattern): one that could never have been paid is a request to fix, 400,
 * audited like any refusal of an authenticated partner, never a 404 that invites a retry.
 */
describe("GET /users/{id}/payouts/{payout_id} with a malformed payout id, user id or query (HTTP)", () => {
  let stack: TestStack;
  let token: string;
  let clientId: string;
  let user: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    const partner = await createPartner(stack, { entitlements: ["payouts:receive"] });
    clientId = partner.clientId;
    user = (await createUserFor(stack, partner, ["payouts:receive"])).userId;
    token = await mintPartnerToken(stack, partner);
  });
  after(() => stack.close());

  const rowsOf = async (res: ApiResponse) =>
    (await stack.core.db("audit_records").where({ request_id: res.headers.get("x-request-id")! })).map((r) => [r.actor, r.action, r.reason]);

  for (const [label, id] of [
    ["a space", "a%20b"],
    ["a non-ASCII letter", "%C3%A9"],
    ["a slash", "a%2Fb"],
    ["129 characters", "x".repeat(129)],
  ] as const) {
    it(`${label}: 400 invalid_request naming the rule, audited under the partner`, async () => {
      const res = await api(stack, "GET", `/users/${user}/payouts/${id}`, { token });
      expectHttpError(res, 400, "invalid_request");
      expect(res.text).to.contain("payout_id must be 1 to 128 characters of A-Z a-z 0-9");
      expect(await rowsOf(res)).to.deep.equal([[`partner:${clientId}`, "partner.payouts.read", "invalid_request"]]);
    });
  }

  it("a well-formed unknown id is still 404 not_found; a forged bearer is 401 before the id is looked at", async () => {
    expectHttpError(await api(stack, "GET", `/users/${user}/payouts/po-unknown`, { token }), 404, "not_found");
    const forged = await api(stack, "GET", `/users/${user}/payouts/a%20b`, { headers: { authorization: "Bearer eyJhbGciOiJFUzI1NiJ9.e30.AAAA" } });
    expectHttpError(forged, 401, "invalid_token");
  });

  // As on every user resource: the caller is judged before the request's shape.
  const forgedBearer = () => `Bearer ${token.slice(0, -4)}${token.endsWith("AAAA") ? "BBBB" : "AAAA"}`;

  it("a stray query or a user id that is not a UUID: a forged token 401 and no audit row, a valid one 400 audited", async () => {
    for (const [path, message] of [
      [`/users/${user}/payouts/po-1?x=1`, "unknown query parameter: x"],
      ["/users/not-a-uuid/payouts/po-1", "user id must be a UUID"],
    ] as const) {
      const forged = await api(stack, "GET", path, { headers: { authorization: forgedBearer() } });
      expectHttpError(forged, 401, "invalid_token");
      expect(await rowsOf(forged), path).to.deep.equal([]);
      const res = await api(stack, "GET", path, { token });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message).to.equal(message);
      expect(await rowsOf(res), path).to.deep.equal([[`partner:${clientId}`, "partner.payouts.read", "invalid_request"]]);
    }
  });

  it("a suspended partner's token with a stray query: 403 partner_inactive, audited as such", async () => {
    const other = await createPartner(stack, { entitlements: ["payouts:receive"] });
    const otherUser = (await createUserFor(stack, other, ["payouts:receive"])).userId;
    const otherToken = await mintPartnerToken(stack, other);
    await stack.admin.partners.setPartnerStatus({ clientId: other.clientId, status: PartnerStatus.SUSPENDED });
    const res = await api(stack, "GET", `/users/${otherUser}/payouts/po-1?x=1`, { token: otherToken });
    expectHttpError(res, 403, "partner_inactive");
    expect((await rowsOf(res)).map(([actor, , reason]) => [actor, reason])).to.deep.equal([[`partner:${other.clientId}`, "partner_inactive"]]);
  });

  it("forged and valid callers with stray queries, concurrently: every forged one 401, every valid one 400 (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent callers need several connections");
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        api(stack, "GET", `/users/${user}/payouts/po-${i}?x=${i}`, i % 2 ? { headers: { authorization: forgedBearer() } } : { token }),
      ),
    );
    for (const [i, res] of answers.entries()) {
      if (i % 2) expectHttpError(res, 401, "invalid_token");
      else expectHttpError(res, 400, "invalid_request");
      expect(await rowsOf(res)).to.have.length(i % 2 ? 0 : 1);
    }
  });

  it("many concurrent malformed and unknown ids each get their own answer (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent callers need several connections");
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => api(stack, "GET", `/users/${user}/payouts/${i % 2 ? `bad%20${i}` : `po-${i}`}`, { token })),
    );
    for (const [i, res] of answers.entries()) expectHttpError(res, i % 2 ? 400 : 404, i % 2 ? "invalid_request" : "not_found");
  });
});
