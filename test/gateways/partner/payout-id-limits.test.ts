import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { bindTreasury } from "../../support/treasury.js";

/** An over-long id is refused naming the field and its limit, like every other field error. */
describe("partner treasury: over-long ids name the field and the limit", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack.close());

  async function setup() {
    const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive"] });
    const payer = await bindTreasury(stack.admin, partner, { balanceCents: 10_000n });
    const { userId } = await createUserFor(stack, partner, ["payouts:receive"]);
    return { partner, payer, user: userId, token: await mintPartnerToken(stack, partner) };
  }

  const item = (user: string) => ({
    execution_id: `ex-${randomUUID()}`,
    payout_id: `po-${randomUUID()}`,
    recipient: { user_id: user },
    amount_cents: 100,
    currency: "USD",
    reference: "rent",
  });
  const message = (res: { body: unknown }) => (res.body as { error: { message: string } }).error.message;

  for (const field of ["payout_id", "execution_id"] as const) {
    it(`a ${field} of 500 characters is 400 naming items[0].${field} and 128, and pays nothing`, async () => {
      const { partner, payer, user, token } = await setup();
      const it0 = { ...item(user), [field]: "p".repeat(500) };
      const res = await api(stack, "POST", "/treasury/payouts", {
        token,
        json: { payer_entity_id: payer, items: [it0] },
        headers: { "idempotency-key": `k-${randomUUID()}` },
      });
      expectHttpError(res, 400, "invalid_request");
      expect(message(res)).to.match(new RegExp(`^items\\[0\\]\\.${field} .*\\b128\\b`));
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM treasury_executions WHERE partner_id = ?`, [partner.partnerId]);
      expect(rows[0].n).to.equal(0);
    });
  }

  it("an Idempotency-Key of 500 characters is 400 naming the header and 255", async () => {
    const { payer, user, token } = await setup();
    const res = await api(stack, "POST", "/treasury/payouts", {
      token,
      json: { payer_entity_id: payer, items: [item(user)] },
      headers: { "idempotency-key": "k".repeat(500) },
    });
    expectHttpError(res, 400, "invalid_request");
    expect(message(res)).to.match(/^Idempotency-Key .*\b255\b/);
  });

  it("a receipt read with a payout_id of 500 characters is 400 naming payout_id and 128", async () => {
    const { user, token } = await setup();
    const res = await api(stack, "GET", `/users/${user}/payouts/${"p".repeat(500)}`, { token });
    expectHttpError(res, 400, "invalid_request");
    expect(message(res)).to.match(/^payout_id .*\b128\b/);
  });

  it("a user id of 500 characters in any path is 400 saying it must be a UUID", async () => {
    const { token } = await setup();
    for (const path of [`/users/${"u".repeat(500)}/kyc`, `/users/${"u".repeat(500)}/payouts/po-1`]) {
      const res = await api(stack, "GET", path, { token });
      expectHttpError(res, 400, "invalid_request");
      expect(message(res), path).to.equal("user id must be a UUID");
    }
  });

  it("a reference of 500 characters is 400 naming items[0].reference and 140", async () => {
    const { payer, user, token } = await setup();
    const res = await api(stack, "POST", "/treasury/payouts", {
      token,
      json: { payer_entity_id: payer, items: [{ ...item(user), reference: "r".repeat(500) }] },
      headers: { "idempotency-key": `k-${randomUUID()}` },
    });
    expectHttpError(res, 400, "invalid_request");
    expect(message(res)).to.match(/^items\[0\]\.reference .*\b140\b/);
  });
});
