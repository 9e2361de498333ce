import { request } from "node:http";
import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner, mintPartnerToken } from "../../support/partners.js";
import { expectHttpError, type HttpResponse } from "../../support/refusals.js";
import { partnerWithPayee } from "../../support/treasury.js";

/** A JSON route reads a body only when it is labelled application/json; an empty label is no label. */
describe("partner API: the Content-Type of a JSON body", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack.close());

  /** Raw node:http, so the header goes out exactly as given (fetch would drop or rewrite it). */
  const post = (path: string, headers: Record<string, string>, body: string) => postRaw(`/api/partner${path}`, headers, body);

  function postRaw(path: string, headers: Record<string, string>, body: string): Promise<HttpResponse> {
    const url = new URL(`${stack.url}${path}`);
    return new Promise((resolve, reject) => {
      const req = request(url, { method: "POST", headers: { ...headers, "content-length": String(Buffer.byteLength(body)) } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => {
          const h = new Headers();
          for (const [k, v] of Object.entries(res.headers)) if (typeof v === "string") h.set(k, v);
          resolve({ status: res.statusCode!, headers: h, body: JSON.parse(text) as unknown, text });
        });
      });
      req.on("error", reject);
      req.end(body);
    });
  }

  for (const type of [undefined, "", " ", "text/plain", ";charset=utf-8", "json"]) {
    it(`POST /users labelled ${type === undefined ? "nothing" : JSON.stringify(type)} is 400 invalid_request and creates no user`, async () => {
      const partner = await createPartner(stack);
      const token = await mintPartnerToken(stack, partner);
      const local = `ct-${randomUUID().slice(0, 8)}`;
      const res = await post(
        "/users",
        { authorization: `Bearer ${token}`, ...(type === undefined ? {} : { "content-type": type }) },
        JSON.stringify({ email: `${local}@example.com` }),
      );
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message).to.equal("content type must be application/json");
      const { rows } = await stack.core.db.raw(`SELECT email FROM users WHERE email LIKE ?`, [`${local}%`]);
      expect(rows).to.deep.equal([]);
    });
  }

  it("POST /treasury/payouts with an empty Content-Type is 400 invalid_request and pays nothing", async () => {
    const { payer, userId, token } = await partnerWithPayee(stack);
    const item = {
      execution_id: `ex-${randomUUID()}`,
      payout_id: `po-${randomUUID()}`,
      recipient: { user_id: userId },
      amount_cents: 100,
      currency: "USD",
      reference: "rent",
    };
    const headers = { authorization: `Bearer ${token}`, "content-type": "", "idempotency-key": `k-${randomUUID()}` };
    const res = await post("/treasury/payouts", headers, JSON.stringify({ payer_entity_id: payer, items: [item] }));
    expectHttpError(res, 400, "invalid_request");
    expect((res.body as { error: { message: string } }).error.message).to.equal("content type must be application/json");
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM treasury_executions WHERE execution_id = ?`, [item.execution_id]);
    expect(rows[0].n).to.equal(0);
  });

  it("hostile: a forged token with an empty Content-Type is told 401 first, as with a wrong one", async () => {
    for (const type of ["", "text/plain"]) {
      const res = await post("/users", { authorization: "Bearer forged.token.value", "content-type": type }, `{"email":"x@example.com"}`);
      expectHttpError(res, 401, "invalid_token");
    }
  });

  it("the token endpoint answers an empty or media-type-less label as it answers a wrong one", async () => {
    const partner = await createPartner(stack);
    const auth = basic(partner.clientId, partner.clientSecret);
    for (const type of ["", "json", "text/plain"]) {
      const res = await postRaw("/api/partner/oauth/token", { authorization: auth, "content-type": type }, "grant_type=client_credentials");
      expect(res.status, type).to.equal(400);
      expect(JSON.parse(res.text), type).to.deep.equal({
        error: "invalid_request",
        error_description: "content type must be application/x-www-form-urlencoded",
      });
    }
  });

  it("a JSON label in any case, with parameters, is read as JSON", async () => {
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    const res = await post(
      "/users",
      { authorization: `Bearer ${token}`, "content-type": "Application/JSON; charset=utf-8" },
      JSON.stringify({ email: `ct-${randomUUID().slice(0, 8)}@example.com` }),
    );
    expect(res.status, res.text).to.be.oneOf([200, 201]);
  });
});
