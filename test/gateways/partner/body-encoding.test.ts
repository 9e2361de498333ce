import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { expectHttpError, type HttpResponse } from "../../support/refusals.js";
import { partnerWithPayee } from "../../support/treasury.js";

/** JSON is UTF-8 (RFC 8259): bytes that are not UTF-8 are refused, never stored as U+FFFD. */
describe("partner API: a body that is not UTF-8", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack.close());

  async function post(path: string, token: string, body: Buffer, headers: Record<string, string> = {}): Promise<HttpResponse> {
    const res = await fetch(`${stack.url}/api/partner${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json; charset=iso-8859-1", ...headers },
      body,
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: JSON.parse(text) as unknown, text };
  }

  it("POST /users with a Latin-1 e-mail is 400 invalid_json and creates no user", async () => {
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    const local = `caf-${randomUUID().slice(0, 8)}`;
    const res = await post("/users", token, Buffer.from(`{"email":"${local}\u00e9@example.com"}`, "latin1"));
    expectHttpError(res, 400, "invalid_json");
    const { rows } = await stack.core.db.raw(`SELECT email FROM users WHERE email LIKE ?`, [`${local}%`]);
    expect(rows).to.deep.equal([]);
  });

  it("POST /treasury/payouts with a Latin-1 reference is 400 invalid_json and pays nothing", async () => {
    const { payer, userId, token } = await partnerWithPayee(stack);
    const item = {
      execution_id: `ex-${randomUUID()}`,
      payout_id: `po-${randomUUID()}`,
      recipient: { user_id: userId },
      amount_cents: 100,
      currency: "USD",
      reference: "Caf\u00e9",
    };
    const body = Buffer.from(JSON.stringify({ payer_entity_id: payer, items: [item] }), "latin1");
    const res = await post("/treasury/payouts", token, body, { "idempotency-key": `k-${randomUUID()}` });
    expectHttpError(res, 400, "invalid_json");
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM treasury_executions WHERE execution_id = ?`, [item.execution_id]);
    expect(rows[0].n).to.equal(0);
  });
});
