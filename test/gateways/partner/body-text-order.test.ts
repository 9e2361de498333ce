import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { api } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";

/**
 * A NUL or lone surrogate in a JSON body is refused while the body is read, like unparsable
 * JSON: before the bearer is looked at (unlike one in the query or path, which comes after).
 */
describe("partner API: NUL in a JSON body is refused before the bearer check", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack.close());

  const item = {
    execution_id: `ex-${randomUUID()}`,
    payout_id: `po-${randomUUID()}`,
    recipient: { user_id: randomUUID() },
    amount_cents: 100,
    currency: "USD",
    reference: "a\u0000b",
  };
  const cases: [string, unknown, string, Record<string, string>][] = [
    ["/users", { email: "a\u0000b@example.com" }, "email must not contain NUL characters", {}],
    ["/treasury/payouts", { payer_entity_id: randomUUID(), items: [item] }, "items[0].reference must not contain NUL characters", { "idempotency-key": "k-1" }],
  ];

  for (const token of [undefined, "forged.token.value"]) {
    for (const [path, json, message, headers] of cases) {
      it(`POST ${path} ${token ? "with a forged token" : "without a bearer"} is 400 invalid_request naming the field`, async () => {
        const res = await api(stack, "POST", path, { token, json, headers });
        expectHttpError(res, 400, "invalid_request");
        expect((res.body as { error: { message: string } }).error.message).to.equal(message);
      });
    }
  }
});
