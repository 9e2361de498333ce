import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { bindTreasury } from "../../support/treasury.js";
import { atOnceOnPostgres } from "../../support/db.js";

/**
 * A partner request with a missing or bad bearer proves no partner: it answers 401
 * invalid_token with a Bearer challenge and writes no audit row, on partner REST
 * and the treasury routes alike, so a flood of them cannot grow the audit trail.
 */
describe("unauthenticated partner requests write no audit rows (HTTP)", () => {
  let stack: TestStack;
  let user: string;
  let payer: string;
  let token: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive", "kyc:read"] });
    payer = await bindTreasury(stack.admin, partner, { balanceCents: 1000n });
    user = (await createUserFor(stack, partner, ["kyc:read"])).userId;
    token = await mintPartnerToken(stack, partner);
  });
  after(() => stack.close());

  const auditRows = async () => Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n);

  it("50 requests with bad or missing bearers (concurrently on PostgreSQL) each answer 401 and add no audit row", async () => {
    // A hostile caller: its own partner's token with the signature altered, garbage, another scheme, none.
    const tampered = token.slice(0, -4) + (token.endsWith("AAAA") ? "BBBB" : "AAAA");
    const bearers: Record<string, string>[] = [
      { authorization: `Bearer ${tampered}` },
      { authorization: "Bearer not.a.token" },
      { authorization: "Basic abc" },
      {},
    ];
    const routes: [string, string, unknown?][] = [
      ["GET", `/users/${user}/kyc`],
      ["GET", "/events"],
      ["POST", "/users", { email: "someone@example.com" }],
      ["GET", "/treasury"],
      ["POST", "/treasury/payouts", { payer_entity_id: payer, items: [] }],
    ];
    const before = await auditRows();
    const send = (i: number): Promise<ApiResponse> => {
      const [method, path, json] = routes[i % routes.length]!;
      const headers = { ...bearers[i % bearers.length], "idempotency-key": `k-anon-${i}`, ...(json ? { "content-type": "application/json" } : {}) };
      return api(stack, method, path, { json, headers });
    };
    const indexes = Array.from({ length: 50 }, (_, i) => i);
    const answers = await atOnceOnPostgres(indexes, send);
    for (const res of answers) expectHttpError(res, 401, "invalid_token");
    // RFC 6750 3.1: error="invalid_token" only where a bearer token was sent.
    answers.forEach((res, i) => {
      const sent = bearers[i % bearers.length]!.authorization ?? "";
      expect(res.headers.get("www-authenticate"), sent).to.equal(sent.startsWith("Bearer ") ? 'Bearer error="invalid_token"' : "Bearer");
    });
    // The message tells a missing bearer from a bad one the same way on every route.
    answers.forEach((res, i) => {
      const sent = bearers[i % bearers.length]!.authorization ?? "";
      const { message } = (res.body as { error: { message: string } }).error;
      const expected = sent.startsWith("Bearer ") ? "the access token is invalid" : "a bearer access token is required";
      expect(message, `${routes[i % routes.length]![1]} with ${sent || "no authorization"}`).to.equal(expected);
    });
    expect(await auditRows()).to.equal(before);
    // The partner's own token still works and is audited.
    const ok = await api(stack, "GET", "/treasury", { token });
    expect(ok.status, ok.text).to.equal(200);
    expect(await auditRows()).to.equal(before + 1);
  });
});
