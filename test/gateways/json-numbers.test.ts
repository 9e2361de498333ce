import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { expectHttpError } from "../support/refusals.js";
import { api, type ApiResponse } from "../support/resources.js";
import { startStack, type TestStack } from "../support/stack.js";

/** A numeral of 64 KiB less a little, zeros between two ones: no double holds it. */
const numeral = `1${"0".repeat(64 * 1024 - 400)}1`;

/**
 * A number JSON.parse would round is refused where a number belongs; reading a long one costs one
 * pass over it, so a body full of digits answers at once instead of stalling every request.
 */
describe("JSON numbers too long to hold (HTTP)", () => {
  let stack: TestStack;
  let treasuryToken: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    treasuryToken = await mintPartnerToken(stack, await createPartner(stack, { entitlements: ["treasury:write"] }), "treasury:write");
  });
  after(() => stack.close());

  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });

  it("treasury batch: 400 invalid_request naming the amount; JSON-RPC: an answer, never a stall", async function () {
    // Two such bodies took about 10 s of CPU when zero runs were trimmed with a backtracking regex.
    this.timeout(5_000);
    const item = `{"execution_id":"e1","payout_id":"p1","recipient":{"user_id":"${randomUUID()}"},"amount_cents":${numeral},"currency":"USD","reference":"r"}`;
    const batch = await post("/api/partner/treasury/payouts", `{"payer_entity_id":"${randomUUID()}","items":[${item}]}`, {
      authorization: `Bearer ${treasuryToken}`,
      "idempotency-key": "json-numbers-test",
    });
    const refused = (await batch.json()) as { error: { code: string; message: string } };
    expect([batch.status, refused.error.code]).to.deep.equal([400, "invalid_request"]);
    expect(refused.error.message).to.match(/^items\[0\]\.amount_cents /);

    const rpc = await post("/mcp/read", `{"jsonrpc":"2.0","id":${numeral},"method":"tools/list"}`);
    expect(rpc.status).to.be.below(500);
    await rpc.arrayBuffer();
  });

  it("a numeral where an object belongs is refused naming that field, not a field the caller never sent", async () => {
    const item = (recipient: string) => `{"execution_id":"e1","payout_id":"p1","recipient":${recipient},"amount_cents":1,"currency":"USD","reference":"r"}`;
    const batch = (items: string, key: string) =>
      api(stack, "POST", "/treasury/payouts", {
        token: treasuryToken,
        rawBody: `{"payer_entity_id":"${randomUUID()}","items":[${items}]}`,
        headers: { "idempotency-key": key },
      });
    const cases: [Promise<ApiResponse>, string][] = [
      [batch(item("1e400"), "inexact-recipient"), "items[0].recipient must be an object"],
      [batch("1e400", "inexact-item"), "items[0] must be an object"],
      [api(stack, "POST", "/users", { token: treasuryToken, rawBody: "1e400" }), "the body must be a JSON object"],
      [api(stack, "POST", "/users", { token: treasuryToken, rawBody: `{"email":9007199254740993}` }), "email must be a string of 3 to 254 characters"],
    ];
    for (const [res, message] of cases) {
      const refused = await res;
      expectHttpError(refused, 400, "invalid_request");
      expect((refused.body as { error: { message: string } }).error.message).to.equal(message);
    }
  });
});
