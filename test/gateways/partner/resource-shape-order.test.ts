import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { requirePostgres } from "../../support/db.js";
import { startStack, TEST_AUDIENCE, TEST_ISSUER, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken, type TestPartner } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";

const SCOPES = ["kyc:read", "wallet:read", "us_account:read", "transfers:read"];

/**
 * A resource request whose shape is wrong (a stray query, a bad path id or body field) is judged
 * after its caller: a forged or expired token is 401 and a suspended partner 403 whatever the
 * query says; a valid caller gets the 400 naming the problem, audited under it.
 */
describe("partner resources check the caller before the request's shape (HTTP)", () => {
  let stack: TestStack;
  let partner: TestPartner;
  let user: string;
  let token: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    partner = await createPartner(stack, { entitlements: SCOPES });
    user = (await createUserFor(stack, partner, SCOPES)).userId;
    token = await mintPartnerToken(stack, partner);
  });
  after(() => stack.close());

  /** Each consent-gated route with a query parameter it does not take, and its audit action. */
  const routes = (): [string, string, string, unknown?][] => [
    ["GET", `/users/${user}/kyc?x=1`, "partner.kyc.read"],
    ["GET", `/users/${user}/wallets?x=1`, "partner.wallets.read"],
    ["GET", `/users/${user}/us-account?x=1`, "partner.us_account.read"],
    ["GET", `/users/${user}/transfers?x=1`, "partner.transfers.read"],
    ["GET", "/events?x=1", "partner.events.read"],
    ["POST", "/users?x=1", "partner.users.create", { email: `q-${randomUUID()}@example.com` }],
    ["POST", `/users/${user}/kyc/link?x=1`, "partner.kyc.link", {}],
  ];
  const send = (method: string, path: string, json: unknown, headers: Record<string, string>) => api(stack, method, path, { json, headers });
  const rowsOf = async (res: ApiResponse) =>
    (await stack.core.db("audit_records").where({ request_id: res.headers.get("x-request-id")! })).map((r) => [r.actor, r.action, r.reason]);
  const tampered = () => token.slice(0, -4) + (token.endsWith("AAAA") ? "BBBB" : "AAAA");
  const expired = () => {
    const now = Math.floor(stack.clock().getTime() / 1000);
    const claims = { iss: TEST_ISSUER, aud: TEST_AUDIENCE, sub: partner.clientId, client_id: partner.clientId, scope: SCOPES.join(" ") };
    return stack.core.keyring.signJwt({ typ: "at+jwt" }, { ...claims, jti: randomUUID(), iat: now - 3700, nbf: now - 3700, exp: now - 100 });
  };

  for (const [label, bearer] of [
    ["a forged token (its own, signature altered)", tampered],
    ["an expired token", expired],
  ] as const) {
    it(`${label} with a stray query: 401 invalid_token on every route, and no audit row`, async () => {
      const authorization = `Bearer ${await bearer()}`;
      for (const [method, path, , json] of routes()) {
        const res = await send(method, path, json, { authorization });
        expectHttpError(res, 401, "invalid_token");
        expect(res.headers.get("www-authenticate"), path).to.equal('Bearer error="invalid_token"');
        expect(await rowsOf(res), path).to.deep.equal([]);
      }
    });
  }

  it("a forged token with a bad path id, an unknown body field or a bad page size: 401, not 400", async () => {
    const authorization = `Bearer ${tampered()}`;
    for (const [method, path, json] of [
      ["GET", "/users/not-a-uuid/kyc", undefined],
      ["POST", "/users", { email: "a@example.com", extra: 1 }],
      ["POST", "/users", undefined],
      ["GET", `/users/${user}/transfers?limit=0`, undefined],
      ["GET", "/events?cursor=a&cursor=b", undefined],
    ] as const) {
      expectHttpError(await send(method, path, json, { authorization }), 401, "invalid_token");
    }
  });

  it("a suspended partner's valid token with a stray query: 403 partner_inactive, audited as such", async () => {
    const other = await createPartner(stack, { entitlements: SCOPES });
    const otherUser = (await createUserFor(stack, other, SCOPES)).userId;
    const otherToken = await mintPartnerToken(stack, other);
    await stack.admin.partners.setPartnerStatus({ clientId: other.clientId, status: PartnerStatus.SUSPENDED });
    for (const path of [`/users/${otherUser}/kyc?x=1`, "/events?x=1", "/users/not-a-uuid/wallets"]) {
      const res = await send("GET", path, undefined, { authorization: `Bearer ${otherToken}` });
      expectHttpError(res, 403, "partner_inactive");
      expect((await rowsOf(res)).map(([actor, , reason]) => [actor, reason])).to.deep.equal([[`partner:${other.clientId}`, "partner_inactive"]]);
    }
  });

  it("a valid token with a stray query: 400 naming the parameter, audited under the partner, nothing created", async () => {
    for (const [method, path, action, json] of routes()) {
      const res = await send(method, path, json, { authorization: `Bearer ${token}` });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message, path).to.equal("unknown query parameter: x");
      expect(await rowsOf(res), path).to.deep.equal([[`partner:${partner.clientId}`, action, "invalid_request"]]);
    }
    const email = (routes()[5]![3] as { email: string }).email;
    expect(await stack.core.db("users").where({ email })).to.have.length(0);
  });

  it("a valid token with another shape problem: the same 400 as before, now audited", async () => {
    for (const [method, path, json, message] of [
      ["GET", "/users/not-a-uuid/kyc", undefined, "user id must be a UUID"],
      ["POST", "/users", { email: "a@example.com", extra: 1 }, "unknown field: extra"],
      ["GET", `/users/${user}/transfers?limit=0`, undefined, "limit must be an integer from 1 to 100"],
      ["GET", "/events?cursor=a&cursor=b", undefined, "repeated query parameter: cursor"],
    ] as const) {
      const res = await send(method, path, json, { authorization: `Bearer ${token}` });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message).to.equal(message);
      expect((await rowsOf(res)).map(([, , reason]) => reason)).to.deep.equal(["invalid_request"]);
    }
  });

  it("the same requests without the query still answer (the shape check lets a good request through)", async () => {
    const authorization = `Bearer ${token}`;
    for (const [method, path, , json] of routes()) {
      const res = await send(method, path.replace(/\?x=1$/, ""), json, { authorization });
      expect(res.status, `${path}: ${res.text}`).to.be.oneOf([200, 201]);
    }
  });

  it("forged and valid callers with stray queries, concurrently: every forged one 401, every valid one 400 (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent callers need several connections");
    const forged = `Bearer ${tampered()}`;
    const list = routes();
    const answers = await Promise.all(
      Array.from({ length: 42 }, (_, i) => {
        const [method, path, , json] = list[i % list.length]!;
        return send(method, `${path}${i}`, json, { authorization: i % 2 ? forged : `Bearer ${token}` });
      }),
    );
    for (const [i, res] of answers.entries()) {
      if (i % 2) expectHttpError(res, 401, "invalid_token");
      else expectHttpError(res, 400, "invalid_request");
      expect(await rowsOf(res)).to.have.length(i % 2 ? 0 : 1);
    }
  });
});
