import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { loadOpenApi, type OpenApiChecker } from "../../support/openapi.js";
import { bindTreasury } from "../../support/treasury.js";

/**
 * A client validating requests against the served OpenAPI document must pass where the API says
 * yes and stop where it answers 400: each case goes to the real API and through a strict validator.
 */
describe("partner OpenAPI request schemas agree with the API", () => {
  let stack: TestStack;
  let openapi: OpenApiChecker;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    openapi = await loadOpenApi(stack.url);
  });
  after(() => stack.close());

  /** Sends the request, then asks the document whether it accepts the same request. */
  async function agree(method: string, path: string, token: string, json: unknown, headers: Record<string, string> = {}) {
    const res = await api(stack, method, path, { token, json, headers });
    expect(res.status, res.text).to.be.below(500);
    const byDoc = openapi.acceptsRequest(method, path, json, headers);
    const byApi = res.status !== 400;
    expect(byDoc.ok, `${method} ${path} ${JSON.stringify(json)} ${JSON.stringify(headers)}: API ${res.status} ${res.text}; document: ${byDoc.errors}`).to.equal(
      byApi,
    );
  }

  it("POST /users: internationalized addresses the API takes are valid in the document", async () => {
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    const tag = randomUUID().slice(0, 8);
    const outside = [`.ada-${tag}@example.com`, `a..b-${tag}@example.com`, `${tag}${"a".repeat(57)}@example.com`, `"ada-${tag}"@example.com`];
    outside.push(` ada-${tag}@example.com`, `ada-${tag}@example.com `, `ada-${tag}@example.com\t`, `ada-${tag}@example.com\u00a0`);
    outside.push(`ip-${tag}@127.0.0.1`, `ip-${tag}@[127.0.0.1]`, `ada-${tag}@-example.com`, `ada-${tag}@ex_ample.com`, `ada-${tag}@example..com`);
    for (const email of [`ada-${tag}@bücher.example`, `zoë-${tag}@example.com`, `ada-${tag}@example.com`, `not-an-address-${tag}`, ...outside]) {
      await agree("POST", "/users", token, { email });
    }
  });

  it("POST /users/{id}/kyc/link: a redirect_uri with non-ASCII characters, as the API takes it", async () => {
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const token = await mintPartnerToken(stack, partner);
    const { userId } = await createUserFor(stack, partner, ["kyc:read"]);
    for (const redirect_uri of ["https://bücher.example/fertig?schritt=é", "https://app.example.com/done", "ftp://app.example.com/"]) {
      await agree("POST", `/users/${userId}/kyc/link`, token, { provider: "sandbox", redirect_uri });
    }
  });

  it("POST /users/{id}/kyc/link: the document takes the redirect_uri spellings the API takes, and no others", async () => {
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const token = await mintPartnerToken(stack, partner);
    const { userId } = await createUserFor(stack, partner, ["kyc:read"]);
    const taken = ["HTTPS://App.Example/done", "https://app.example:8443", "http://127.0.0.1:3000/cb", "http://localhost/cb", "http://[::1]:8080/?a=b"];
    const credentials = ["https://ada@app.example/", "https://ada:pw@app.example/", "http://localhost@evil.example/", "https://app.example\\@evil.example/"];
    const elsewhere = ["http://app.example.com/", "http://127.1/", "http://localhost.evil.example/", "https:app.example/done", "https:/app.example/"];
    const forgiven = [
      "https://127.1/",
      "https://0x7f.1:8443/",
      "https://2130706433",
      "https://%30x7f.1/",
      "https://app.example/a\tb",
      "https://app.example/done ",
    ];
    const portZero = ["https://app.example:0/", "http://localhost:00/cb"];
    for (const redirect_uri of [...taken, ...credentials, ...elsewhere, ...forgiven, ...portZero]) {
      await agree("POST", `/users/${userId}/kyc/link`, token, { provider: "sandbox", redirect_uri });
    }
    // A host the parser reads as 127.0.0.1 or characters it drops would not be the URL written; port 0 is no destination.
    for (const redirect_uri of [...forgiven, ...portZero]) {
      const res = await api(stack, "POST", `/users/${userId}/kyc/link`, { token, json: { provider: "sandbox", redirect_uri } });
      expect(res.status, redirect_uri).to.equal(400);
    }
  });

  it("POST /users/{id}/kyc/link: a body that is not a JSON object, null included, is refused as the document refuses it", async () => {
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const token = await mintPartnerToken(stack, partner);
    const { userId } = await createUserFor(stack, partner, ["kyc:read"]);
    for (const body of [null, 5, [], {}]) await agree("POST", `/users/${userId}/kyc/link`, token, body);
    const res = await api(stack, "POST", `/users/${userId}/kyc/link`, { token, rawBody: "null" });
    expect((res.body as { error: { message: string } }).error.message).to.equal("the body must be a JSON object");
    // No body at all is still an empty request.
    expect((await api(stack, "POST", `/users/${userId}/kyc/link`, { token })).status).to.equal(201);
  });

  it("POST /treasury/payouts: the document refuses the keys and references the API refuses", async () => {
    const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive"] });
    const payer = await bindTreasury(stack.admin, partner);
    const { userId } = await createUserFor(stack, partner, ["payouts:receive"]);
    const token = await mintPartnerToken(stack, partner);
    const batch = (reference: string) => ({
      payer_entity_id: payer,
      items: [
        { execution_id: `ex-${randomUUID()}`, payout_id: `po-${randomUUID()}`, recipient: { user_id: userId }, amount_cents: 100, currency: "USD", reference },
      ],
    });
    await agree("POST", "/treasury/payouts", token, batch("May payroll"), { "idempotency-key": `k-${randomUUID()}` });
    await agree("POST", "/treasury/payouts", token, batch("café ☕"), { "idempotency-key": `k-${randomUUID()}` });
    await agree("POST", "/treasury/payouts", token, batch("line\nbreak"), { "idempotency-key": `k-${randomUUID()}` });
    await agree("POST", "/treasury/payouts", token, batch("bell\u0007"), { "idempotency-key": `k-${randomUUID()}` });
    await agree("POST", "/treasury/payouts", token, batch("May payroll"), { "idempotency-key": "two words" });
    await agree("POST", "/treasury/payouts", token, batch("May payroll"), { "idempotency-key": "clé" });
  });
});
