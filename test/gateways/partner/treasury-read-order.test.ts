import { expect } from "chai";
import { requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken, type TestPartner } from "../../support/partners.js";
import { api, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { bindTreasury } from "../../support/treasury.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";

/**
 * `GET /treasury` with a query it does not take is checked like a batch's body problem: bearer,
 * partner, rate and scope come first, so a caller learns nothing about a stray query before its
 * token is proven, and a client that got 401 knows to mint again.
 */
describe("GET /treasury with an unknown query: the bearer and partner are checked first (HTTP)", () => {
  let stack: TestStack;
  let partner: TestPartner;
  let token: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    partner = await createPartner(stack, { entitlements: ["treasury:write", "kyc:read"] });
    await bindTreasury(stack.admin, partner, { balanceCents: 1_000n });
    token = await mintPartnerToken(stack, partner);
  });
  after(() => stack.close());

  const rowsOf = async (res: ApiResponse) =>
    (await stack.core.db("audit_records").where({ request_id: res.headers.get("x-request-id")! })).map((r) => [r.actor, r.action, r.reason]);

  for (const [label, headers] of [
    ["no bearer", {}],
    ["a forged bearer", { authorization: "Bearer eyJhbGciOiJFUzI1NiJ9.e30.AAAA" }],
  ] as const) {
    it(`${label}: 401 invalid_token, not the query's 400, and no audit row`, async () => {
      const res = await api(stack, "GET", "/treasury?x=1", { headers: { ...headers } });
      expectHttpError(res, 401, "invalid_token");
      expect(await rowsOf(res)).to.deep.equal([]);
    });
  }

  it("a token without treasury:write: 403 grant_required before the query", async () => {
    const narrow = await mintPartnerToken(stack, partner, "kyc:read");
    expectHttpError(await api(stack, "GET", "/treasury?x=1", { token: narrow }), 403, "grant_required");
  });

  it("a suspended partner's token: 403 partner_inactive before the query", async () => {
    const other = await createPartner(stack, { entitlements: ["treasury:write"] });
    await bindTreasury(stack.admin, other, { balanceCents: 1n });
    const otherToken = await mintPartnerToken(stack, other);
    await stack.admin.partners.setPartnerStatus({ clientId: other.clientId, status: PartnerStatus.SUSPENDED });
    expectHttpError(await api(stack, "GET", "/treasury?x=1", { token: otherToken }), 403, "partner_inactive");
  });

  it("a valid token: 400 invalid_request, audited under the partner", async () => {
    const res = await api(stack, "GET", "/treasury?x=1", { token });
    expectHttpError(res, 400, "invalid_request");
    expect(await rowsOf(res)).to.deep.equal([[`partner:${partner.clientId}`, "partner.treasury.read", "invalid_request"]]);
  });

  it("many concurrent forged and valid callers with a query each get their own answer (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent callers need several connections");
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        api(stack, "GET", `/treasury?n=${i}`, i % 2 ? { headers: { authorization: "Bearer eyJhbGciOiJFUzI1NiJ9.e30.AAAA" } } : { token }),
      ),
    );
    for (const [i, res] of answers.entries()) {
      if (i % 2) expectHttpError(res, 401, "invalid_token");
      else expectHttpError(res, 400, "invalid_request");
      expect(await rowsOf(res)).to.have.length(i % 2 ? 0 : 1);
    }
  });
});
