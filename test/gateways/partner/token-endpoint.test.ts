import { expect } from "chai";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { Outcome } from "../../../gen/vaultgate/audit/v1/audit_pb.js";
import { startStack, TEST_AUDIENCE, TEST_ISSUER, type TestStack } from "../../support/stack.js";
import { basic, createPartner, postToken, type TestPartner } from "../../support/partners.js";
import { expectOAuthError } from "../../support/refusals.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const CC = "grant_type=client_credentials";

/** The partner token endpoint through real HTTP: credentials, claims, scopes, rotation, errors, rate limit. */
describe("POST /api/partner/oauth/token", () => {
  let stack: TestStack;
  let partner: TestPartner;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  beforeEach(async () => {
    partner = await createPartner(stack);
  });
  after(() => stack.close());

  const viaBasic = (p: TestPartner, body = CC) => postToken(stack.url, body, { authorization: basic(p.clientId, p.clientSecret) });

  describe("success", () => {
    it("mints with HTTP Basic: the token body and no-store headers", async () => {
      const res = await viaBasic(partner);
      expect(res.status).to.equal(200);
      expect(res.headers.get("cache-control")).to.equal("no-store");
      expect(res.headers.get("pragma")).to.equal("no-cache");
      expect(res.headers.get("content-type")).to.match(/^application\/json/);
      expect(res.headers.get("x-request-id")).to.match(UUID);
      const body = (await res.json()) as Record<string, unknown>;
      expect(Object.keys(body).sort()).to.deep.equal(["access_token", "expires_in", "scope", "token_type"]);
      expect(body.token_type).to.equal("Bearer");
      expect(body.expires_in).to.equal(3600);
      expect(body.scope).to.equal("kyc:read wallet:read us_account:read transfers:read payouts:receive");
    });

    it("mints with form credentials", async () => {
      const form = new URLSearchParams({ grant_type: "client_credentials", client_id: partner.clientId, client_secret: partner.clientSecret });
      const res = await postToken(stack.url, form.toString());
      expect(res.status).to.equal(200);
    });

    it("form-decodes each Basic part before use (RFC 6749 2.3.1)", async () => {
      // Percent-encode every character: a server that skips form-decoding fails this.
      const enc = (s: string) => [...s].map((c) => `%${c.charCodeAt(0).toString(16).padStart(2, "0")}`).join("");
      const header = `Basic ${Buffer.from(`${enc(partner.clientId)}:${enc(partner.clientSecret)}`).toString("base64")}`;
      const res = await postToken(stack.url, CC, { authorization: header });
      expect(res.status).to.equal(200);
    });

    it("reads the Basic header as RFC 7235 writes it: the scheme in any case, then one or more spaces", async () => {
      const encoded = Buffer.from(`${partner.clientId}:${partner.clientSecret}`).toString("base64");
      for (const authorization of [`Basic ${encoded}`, `basic ${encoded}`, `Basic   ${encoded}`]) {
        expect((await postToken(stack.url, CC, { authorization })).status, authorization.slice(0, 8)).to.equal(200);
      }
    });

    it("accepts a charset parameter on the form content type", async () => {
      const res = await postToken(stack.url, CC, {
        authorization: basic(partner.clientId, partner.clientSecret),
        "content-type": "application/x-www-form-urlencoded; charset=UTF-8",
      });
      expect(res.status).to.equal(200);
    });

    it("carries exactly the partner token claims", async () => {
      const res = await viaBasic(partner, `${CC}&scope=${encodeURIComponent("kyc:read wallet:read")}`);
      const { access_token } = (await res.json()) as { access_token: string };
      const header = decodeProtectedHeader(access_token);
      expect(header.typ).to.equal("at+jwt");
      expect(header.alg).to.equal("ES256");
      expect(header.kid).to.be.a("string");
      const claims = decodeJwt(access_token);
      expect(Object.keys(claims).sort()).to.deep.equal(["aud", "client_id", "exp", "iat", "iss", "jti", "nbf", "scope", "sub"]);
      expect(claims.iss).to.equal(TEST_ISSUER);
      expect(claims.aud).to.equal(TEST_AUDIENCE);
      expect(claims.sub).to.equal(partner.clientId);
      expect(claims.client_id).to.equal(partner.clientId);
      expect(claims.scope).to.equal("kyc:read wallet:read");
      expect(claims.jti).to.match(UUID);
      expect(claims.iat).to.equal(Math.floor(stack.clock().getTime() / 1000));
      expect(claims.nbf).to.equal(claims.iat);
      expect(claims.exp).to.equal(claims.iat! + 3600);
    });
  });

  describe("credentials", () => {
    it("has the documented shapes, URL-safe", () => {
      expect(partner.clientId).to.match(/^gpc_[a-z0-9-]+_[0-9a-f]{8}$/);
      expect(partner.clientSecret).to.match(/^gps_[A-Za-z0-9_-]{43}$/);
      expect(Buffer.from(partner.clientSecret.slice(4), "base64url")).to.have.length(32);
    });

    it("answers unknown client and wrong secret with identical 401 bodies and a Basic challenge", async () => {
      const unknown = await postToken(stack.url, CC, { authorization: basic("gpc_nobody_00000000", partner.clientSecret) });
      const wrong = await postToken(stack.url, CC, { authorization: basic(partner.clientId, "gps_wrong") });
      const a = await unknown.text();
      const b = await wrong.text();
      expect(unknown.status).to.equal(401);
      expect(wrong.status).to.equal(401);
      expect(a).to.equal(b);
      expect(JSON.parse(a).error).to.equal("invalid_client");
      expect(unknown.headers.get("www-authenticate")).to.equal('Basic realm="vaultgate-partner"');
      expect(wrong.headers.get("www-authenticate")).to.equal('Basic realm="vaultgate-partner"');
    });

    it("answers form-credential failures with 401 too", async () => {
      const form = new URLSearchParams({ grant_type: "client_credentials", client_id: partner.clientId, client_secret: "nope" });
      await expectOAuthError(await postToken(stack.url, form.toString()), 401, "invalid_client");
      await expectOAuthError(await postToken(stack.url, CC), 401, "invalid_client");
    });

    it("refuses pending and suspended clients with 403 invalid_client, and reactivation restores access", async () => {
      const pending = await createPartner(stack, { status: "pending" });
      await expectOAuthError(await viaBasic(pending), 403, "invalid_client");

      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
      await expectOAuthError(await viaBasic(partner), 403, "invalid_client");
      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
      expect((await viaBasic(partner)).status).to.equal(200);
    });

    it("rotation replaces the secret at once and keeps client_id and status", async () => {
      const before = await viaBasic(partner);
      expect(before.status).to.equal(200);
      const rotated = await stack.admin.partners.rotateSecret({ clientId: partner.clientId });
      expect(rotated.clientId).to.equal(partner.clientId);
      expect(rotated.clientSecret).to.not.equal(partner.clientSecret);
      await expectOAuthError(await viaBasic(partner), 401, "invalid_client");
      expect((await viaBasic({ ...partner, clientSecret: rotated.clientSecret })).status).to.equal(200);
      const { partner: after } = await stack.admin.partners.getPartner({ clientId: partner.clientId });
      expect(after!.status).to.equal(PartnerStatus.ACTIVE);
    });
  });

  describe("request checks", () => {
    it("refuses both authentication methods at once", async () => {
      const body = `${CC}&client_id=${partner.clientId}&client_secret=${partner.clientSecret}`;
      const res = await postToken(stack.url, body, { authorization: basic(partner.clientId, partner.clientSecret) });
      await expectOAuthError(res, 400, "invalid_request");
    });

    for (const body of [`${CC}&${CC}`, `${CC}&scope=kyc:read&scope=kyc:read`, "grant_type=client_credentials&client_id=a&client_id=a&client_secret=b"]) {
      it(`refuses a repeated parameter: ${body}`, async () => {
        await expectOAuthError(await postToken(stack.url, body), 400, "invalid_request");
      });
    }

    it("refuses a content type other than application/x-www-form-urlencoded", async () => {
      const auth = basic(partner.clientId, partner.clientSecret);
      await expectOAuthError(
        await postToken(stack.url, JSON.stringify({ grant_type: "client_credentials" }), { authorization: auth, "content-type": "application/json" }),
        400,
        "invalid_request",
      );
      await expectOAuthError(await postToken(stack.url, CC, { authorization: auth, "content-type": "text/plain" }), 400, "invalid_request");
      const none = await fetch(`${stack.url}/api/partner/oauth/token`, { method: "POST", headers: { authorization: auth } });
      await expectOAuthError(none, 400, "invalid_request");
    });

    it("refuses a malformed form body", async () => {
      await expectOAuthError(await viaBasic(partner, "grant_type=client_credentials&scope=%zz"), 400, "invalid_request");
    });

    it("refuses a body over 4096 bytes without reaching core, saying so", async () => {
      const body = `${CC}&pad=${"x".repeat(4096)}`;
      const res = await viaBasic(partner, body);
      const requestId = res.headers.get("x-request-id")!;
      expect((await expectOAuthError(res, 400, "invalid_request")).error_description).to.equal("request body is over 4096 bytes");
      const { records } = await stack.admin.audit.listRecords({ requestId });
      expect(records).to.have.length(0);
    });

    it("accepts a body of exactly 4096 bytes", async () => {
      const base = `${CC}&pad=`;
      const res = await viaBasic(partner, base + "x".repeat(4096 - base.length));
      expect(res.status).to.equal(200);
    });

    it("needs grant_type, and refuses any other grant type", async () => {
      await expectOAuthError(await viaBasic(partner, ""), 400, "invalid_request");
      await expectOAuthError(await viaBasic(partner, "scope=kyc:read"), 400, "invalid_request");
      await expectOAuthError(await viaBasic(partner, "grant_type=password"), 400, "unsupported_grant_type");
      await expectOAuthError(await viaBasic(partner, "grant_type=authorization_code"), 400, "unsupported_grant_type");
    });
  });

  describe("scopes", () => {
    const scopeOf = async (res: Response) => {
      expect(res.status).to.equal(200);
      return ((await res.json()) as { scope: string }).scope;
    };

    it("omitted or empty scope asks for every entitlement", async () => {
      const all = "kyc:read wallet:read us_account:read transfers:read payouts:receive";
      expect(await scopeOf(await viaBasic(partner))).to.equal(all);
      expect(await scopeOf(await viaBasic(partner, `${CC}&scope=`))).to.equal(all);
    });

    it("a scope of only spaces, or with spaces around or doubled, is malformed: invalid_scope, never every entitlement", async () => {
      for (const scope of ["+", "%20%20", "%09", `+kyc:read`, `kyc:read+`, `kyc:read++wallet:read`]) {
        await expectOAuthError(await viaBasic(partner, `${CC}&scope=${scope}`), 400, "invalid_scope");
      }
    });

    it("the published form schema's scope pattern takes exactly the scope strings the endpoint reads", async () => {
      type FormDoc = {
        paths: Record<string, { post: { requestBody: { content: Record<string, { schema: { properties: { scope: { pattern: string } } } }> } } }>;
      };
      const doc = (await (await fetch(`${stack.url}/api/partner/openapi.json`)).json()) as FormDoc;
      const form = doc.paths["/oauth/token"]!.post.requestBody.content["application/x-www-form-urlencoded"]!.schema;
      const pattern = new RegExp(form.properties.scope.pattern, "u");
      // All within the partner's entitlements, so only their spelling decides.
      for (const scope of [
        "",
        "kyc:read",
        "kyc:read wallet:read",
        " ",
        "  ",
        " kyc:read",
        "kyc:read ",
        "kyc:read  wallet:read",
        "\t",
        "kyc:read\twallet:read",
      ]) {
        const res = await viaBasic(partner, `${CC}&scope=${encodeURIComponent(scope)}`);
        expect(res.status, JSON.stringify(scope)).to.equal(pattern.test(scope) ? 200 : 400);
      }
    });

    it("hostile: 20 token requests at once, half with a blank scope: each blank one is invalid_scope, each other one mints", async () => {
      const asks = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? `${CC}&scope=+` : `${CC}&scope=kyc:read`));
      const answers = await Promise.all(asks.map(async (body) => ({ body, res: await viaBasic(partner, body) })));
      for (const { body, res } of answers) {
        if (body.endsWith("+")) await expectOAuthError(res, 400, "invalid_scope");
        else expect(await scopeOf(res)).to.equal("kyc:read");
      }
    });

    it("an explicit subset is granted as asked", async () => {
      expect(await scopeOf(await viaBasic(partner, `${CC}&scope=wallet:read`))).to.equal("wallet:read");
    });

    it("a scope outside the entitlements is invalid_scope", async () => {
      await expectOAuthError(await viaBasic(partner, `${CC}&scope=treasury:write`), 400, "invalid_scope");
      await expectOAuthError(await viaBasic(partner, `${CC}&scope=${encodeURIComponent("kyc:read admin")}`), 400, "invalid_scope");
    });

    it("empty entitlements give an empty scope string", async () => {
      const none = await createPartner(stack, { entitlements: [] });
      expect(await scopeOf(await viaBasic(none))).to.equal("");
      await expectOAuthError(await viaBasic(none, `${CC}&scope=kyc:read`), 400, "invalid_scope");
    });

    it("entitlement changes affect only newly issued tokens", async () => {
      const first = await viaBasic(partner);
      const { access_token: old } = (await first.json()) as { access_token: string };
      await stack.admin.partners.setEntitlements({ clientId: partner.clientId, entitlements: ["kyc:read", "treasury:write"] });
      expect(await scopeOf(await viaBasic(partner))).to.equal("kyc:read treasury:write");
      expect(decodeJwt(old).scope).to.equal("kyc:read wallet:read us_account:read transfers:read payouts:receive");
    });
  });

  describe("rate limit", () => {
    it("answers the 31st issuance in a minute with 429 and Retry-After: 60, counting failures", async () => {
      for (let i = 0; i < 30; i++) {
        const res = i % 3 === 0 ? await viaBasic({ ...partner, clientSecret: "gps_wrong" }) : await viaBasic(partner);
        expect(res.status, `attempt ${i + 1}`).to.equal(i % 3 === 0 ? 401 : 200);
        await res.arrayBuffer();
      }
      const limited = await viaBasic(partner);
      expect(limited.headers.get("retry-after")).to.equal("60");
      await expectOAuthError(limited, 429, "rate_limited");

      // Other clients are unaffected; the window slides with the (injected) clock.
      expect((await viaBasic(await createPartner(stack))).status).to.equal(200);
      stack.clock.advance(60_001);
      expect((await viaBasic(partner)).status).to.equal(200);
    });

    it("counts a secret longer than any issued one as a failed attempt, like any wrong secret", async () => {
      const tooLong = { ...partner, clientSecret: `gps_${"x".repeat(300)}` };
      for (let i = 0; i < 30; i++) await expectOAuthError(await viaBasic(tooLong), 401, "invalid_client");
      const limited = await viaBasic(partner);
      expect(limited.headers.get("retry-after")).to.equal("60");
      await expectOAuthError(limited, 429, "rate_limited");
    });

    it("counts and audits Basic credentials whose secret part is not form-encoded, answering as for a wrong secret", async () => {
      const malformed = { authorization: `Basic ${Buffer.from(`${partner.clientId}:%zz`).toString("base64")}` };
      const first = await postToken(stack.url, CC, malformed);
      expect(first.headers.get("www-authenticate")).to.equal('Basic realm="vaultgate-partner"');
      expect(await first.text()).to.equal(await (await viaBasic({ ...partner, clientSecret: "gps_wrong" })).text());
      const records = (await stack.admin.audit.listRecords({ requestId: first.headers.get("x-request-id")! })).records;
      expect(records.map((r) => [r.action, r.outcome, r.reason])).to.deep.equal([["partner.token.issue", Outcome.FAILURE, "invalid_client"]]);
      for (let i = 2; i < 30; i++) await expectOAuthError(await postToken(stack.url, CC, malformed), 401, "invalid_client");
      await expectOAuthError(await viaBasic(partner), 429, "rate_limited");
    });
  });

  describe("audit", () => {
    it("records success and failure with the request id of the response", async () => {
      const ok = await viaBasic(partner);
      const bad = await viaBasic({ ...partner, clientSecret: "gps_wrong" });
      const okRecords = (await stack.admin.audit.listRecords({ requestId: ok.headers.get("x-request-id")! })).records;
      const badRecords = (await stack.admin.audit.listRecords({ requestId: bad.headers.get("x-request-id")! })).records;
      expect(okRecords.map((r) => [r.action, r.outcome, r.actor])).to.deep.equal([["partner.token.issue", Outcome.SUCCESS, `partner:${partner.clientId}`]]);
      expect(badRecords.map((r) => [r.action, r.outcome, r.reason])).to.deep.equal([["partner.token.issue", Outcome.FAILURE, "invalid_client"]]);
    });
  });

  it("never writes a secret or token to the log", async () => {
    const res = await viaBasic(partner);
    const { access_token } = (await res.json()) as { access_token: string };
    const logs = stack.logs.text();
    // The request was logged (so the capture works) ...
    expect(logs).to.include(res.headers.get("x-request-id")!);
    expect(logs).to.include("/api/partner/oauth/token");
    expect(logs).to.not.include(partner.clientSecret);
    expect(logs).to.not.include(access_token);
    expect(logs).to.not.include(access_token.split(".")[2]);
  });
});
