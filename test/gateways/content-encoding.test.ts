import { randomUUID } from "node:crypto";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";
import { basic, createPartner, mintPartnerToken, type TestPartner } from "../support/partners.js";
import { createUserFor, type ApiResponse } from "../support/resources.js";
import { bindTreasury } from "../support/treasury.js";
import { createOwner, grantFor } from "../support/budgets.js";
import { createJar, formFields, registerClient } from "../support/agent-oauth.js";
import { expectHttpError, expectJsonRpcError, expectOAuthError } from "../support/refusals.js";
import { loadOpenApi, type OpenApiChecker } from "../support/openapi.js";

const JSON_TYPE = "application/json";
const FORM_TYPE = "application/x-www-form-urlencoded";

/**
 * A request body in a content coding the gateway does not decode (gzip, deflate, br, anything
 * but identity) is refused before it is read with 415 and `Accept-Encoding: identity`, in each
 * surface's own envelope, even when the body would be valid once decompressed.
 */
describe("request bodies with a Content-Encoding other than identity are 415 on every surface (HTTP)", () => {
  let stack: TestStack;
  let partner: TestPartner;
  let token: string;
  let payer: string;
  let user: string;
  let openapi: OpenApiChecker;

  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
    partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive", "kyc:read"] });
    payer = await bindTreasury(stack.admin, partner, { balanceCents: 10_000n });
    user = (await createUserFor(stack, partner, ["payouts:receive", "kyc:read"])).userId;
    token = await mintPartnerToken(stack, partner);
    openapi = await loadOpenApi(stack.url);
  });
  after(() => stack.close());

  async function send(path: string, type: string, body: string | Buffer, headers: Record<string, string> = {}): Promise<ApiResponse & { raw: Response }> {
    const res = await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": type, ...headers }, body });
    const text = await res.clone().text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: res.status, headers: res.headers, body: parsed, text, raw: res };
  }
  const gzip = (text: string) => gzipSync(Buffer.from(text));
  const refusedAs415 = (res: ApiResponse, coding: string) => {
    expect(res.status, res.text).to.equal(415);
    expect(res.headers.get("accept-encoding")).to.equal("identity");
    expect(res.text).to.include(`Content-Encoding ${coding} is not supported`);
  };
  const payoutBody = () =>
    JSON.stringify({
      payer_entity_id: payer,
      items: [
        {
          execution_id: `ex-${randomUUID()}`,
          payout_id: `po-${randomUUID()}`,
          recipient: { user_id: user },
          amount_cents: 100,
          currency: "USD",
          reference: "r",
        },
      ],
    });

  describe("partner REST", () => {
    const bearer = () => ({ authorization: `Bearer ${token}` });

    it("a gzip batch that is valid JSON decompressed: 415 unsupported_media_type, nothing paid; the same batch plain then pays", async () => {
      const body = payoutBody();
      const key = `k-${randomUUID()}`;
      const zipped = await send("/api/partner/treasury/payouts", JSON_TYPE, gzip(body), { ...bearer(), "idempotency-key": key, "content-encoding": "gzip" });
      expectHttpError(zipped, 415, "unsupported_media_type");
      refusedAs415(zipped, "gzip");
      openapi.check("POST", "/treasury/payouts", zipped);
      // Audited under the partner as what the client got: unsupported_media_type.
      const rows = await stack.core.db("audit_records").where({ request_id: zipped.headers.get("x-request-id")! });
      expect(rows.map((r) => [r.action, r.outcome, r.reason])).to.deep.equal([["treasury.batch.execute", "failure", "unsupported_media_type"]]);
      const plain = await send("/api/partner/treasury/payouts", JSON_TYPE, body, { ...bearer(), "idempotency-key": key });
      expect(plain.status, plain.text).to.equal(200);
      expect(plain.headers.get("idempotent-replayed")).to.equal(null);
    });

    for (const [coding, compress] of [
      ["gzip", gzipSync],
      ["deflate", deflateSync],
      ["br", brotliCompressSync],
    ] as const) {
      it(`POST /users with a ${coding} body: 415 naming ${coding}, and no user is created`, async () => {
        const email = `enc-${randomUUID()}@example.com`;
        const res = await send("/api/partner/users", JSON_TYPE, compress(Buffer.from(JSON.stringify({ email }))), { ...bearer(), "content-encoding": coding });
        expectHttpError(res, 415, "unsupported_media_type");
        refusedAs415(res, coding);
        openapi.check("POST", "/users", res);
        expect(await stack.core.db("users").where({ email })).to.have.length(0);
      });
    }

    it("a KYC link with a coding listed after identity, or an unknown coding: 415", async () => {
      for (const coding of ["identity, gzip", "x-custom"]) {
        const res = await send(`/api/partner/users/${user}/kyc/link`, JSON_TYPE, "{}", { ...bearer(), "content-encoding": coding });
        expectHttpError(res, 415, "unsupported_media_type");
        expect(res.headers.get("accept-encoding")).to.equal("identity");
      }
    });

    it("a coding name that is not a token is not quoted back", async () => {
      const res = await send("/api/partner/users", JSON_TYPE, "{}", { ...bearer(), "content-encoding": 'gz"<i>p' });
      expectHttpError(res, 415, "unsupported_media_type");
      expect((res.body as { error: { message: string } }).error.message).to.equal(
        "this Content-Encoding is not supported; send the body uncompressed (identity)",
      );
    });

    it("Content-Encoding identity in any case, or none, is read as usual", async () => {
      for (const headers of [{ "content-encoding": "IDENTITY" }, { "content-encoding": "identity, Identity" }, {}] as Record<string, string>[]) {
        const res = await send("/api/partner/users", JSON_TYPE, JSON.stringify({ email: `id-${randomUUID()}@example.com` }), { ...bearer(), ...headers });
        expect(res.status, res.text).to.equal(201);
      }
    });

    it("the partner token endpoint: 415 in its flat OAuth envelope; the same form plain mints", async () => {
      const form = "grant_type=client_credentials";
      const auth = { authorization: basic(partner.clientId, partner.clientSecret) };
      const res = await send("/api/partner/oauth/token", FORM_TYPE, gzip(form), { ...auth, "content-encoding": "gzip" });
      refusedAs415(res, "gzip");
      openapi.check("POST", "/oauth/token", res);
      expect((await expectOAuthError(res.raw, 415, "invalid_request")).error_description).to.match(/gzip/);
      expect((await send("/api/partner/oauth/token", FORM_TYPE, form, auth)).status).to.equal(200);
    });
  });

  describe("agent OAuth", () => {
    it("registration: 415 invalid_client_metadata for a gzip body that is valid metadata decompressed", async () => {
      const metadata = JSON.stringify({ client_name: "zipped", redirect_uris: ["http://127.0.0.1:9/cb"], token_endpoint_auth_method: "client_secret_post" });
      const res = await send("/oauth2/register", JSON_TYPE, gzip(metadata), { "content-encoding": "gzip" });
      refusedAs415(res, "gzip");
      await expectOAuthError(res.raw, 415, "invalid_client_metadata");
      expect((await send("/oauth2/register", JSON_TYPE, metadata)).status).to.equal(201);
    });

    it("token and revocation: 415 invalid_request", async () => {
      const client = (await registerClient(stack)).body;
      const form = new URLSearchParams({ grant_type: "refresh_token", refresh_token: "x", client_id: client.client_id, client_secret: client.client_secret });
      for (const path of ["/oauth2/token", "/oauth2/revoke"]) {
        const res = await send(path, FORM_TYPE, gzip(form.toString()), { "content-encoding": "deflate" });
        refusedAs415(res, "deflate");
        await expectOAuthError(res.raw, 415, "invalid_request");
      }
    });
  });

  it("JSON-RPC: a gzip call that is valid decompressed is 415 -32600 unsupported_media_type, not a parse error", async () => {
    const agent = await grantFor(stack, await createOwner(stack));
    const call = JSON.stringify({ jsonrpc: "2.0", id: 7, method: "ping" });
    const headers = { authorization: `Bearer ${agent}`, accept: "application/json, text/event-stream" };
    const res = await send("/mcp/read", JSON_TYPE, gzip(call), { ...headers, "content-encoding": "gzip" });
    refusedAs415(res, "gzip");
    expectJsonRpcError({ json: res.body, text: res.text }, -32600, "unsupported_media_type");
    const plain = await send("/mcp/read", JSON_TYPE, call, headers);
    expect([plain.status, (plain.body as { result?: unknown }).result]).to.deep.equal([200, {}]);
  });

  it("pages: a gzip sign-in form is an HTML 415 page; the same form plain is accepted", async () => {
    const jar = createJar(stack.url);
    const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
    const form = new URLSearchParams({ ...(fields as Record<string, string>), email: `page-${randomUUID()}@example.com` }).toString();
    const res = await jar.request("/signin", { method: "POST", headers: { "content-type": FORM_TYPE, "content-encoding": "gzip" }, body: gzip(form) });
    const html = await res.text();
    expect(res.status, html).to.equal(415);
    expect(res.headers.get("content-type")).to.match(/^text\/html/);
    expect(res.headers.get("accept-encoding")).to.equal("identity");
    expect(html).to.include("Content-Encoding gzip is not supported");
    const plain = await jar.request("/signin", { method: "POST", headers: { "content-type": FORM_TYPE }, body: form });
    expect(plain.status, await plain.text()).to.equal(303);
  });
});
