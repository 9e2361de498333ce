import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { testDatabase } from "../../support/db.js";
import { startStack, TEST_AUDIENCE, TEST_ISSUER, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError, expectRefused } from "../../support/refusals.js";
import { loadOpenApi, type OpenApiChecker } from "../../support/openapi.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

describe("partner resources over HTTP", () => {
  let stack: TestStack;
  let openapi: OpenApiChecker;
  let auditBroken = false;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0, auditFaults: { appendFault: () => (auditBroken ? new Error("disk full") : undefined) } });
    openapi = await loadOpenApi(stack.url);
  });
  after(() => stack.close());
  afterEach(() => {
    auditBroken = false;
  });

  /** Calls the API and checks the response against the served OpenAPI document. */
  async function call(method: string, path: string, options: Parameters<typeof api>[3] = {}): Promise<ApiResponse> {
    const res = await api(stack, method, path, options);
    openapi.check(method, path, res);
    expect(res.headers.get("x-request-id")).to.match(/^[0-9a-f-]{36}$/);
    return res;
  }

  async function auditRows(requestId: string) {
    const res = await stack.admin.audit.listRecords({ requestId, limit: 10 });
    return res.records;
  }

  describe("OpenAPI document", () => {
    it("is valid OpenAPI 3.1 and describes the token endpoint's answers too", async () => {
      const partner = await createPartner(stack);
      const form = (body: string, headers: Record<string, string> = {}) =>
        fetch(`${stack.url}/api/partner/oauth/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", ...headers }, body });
      const toApi = async (res: Response): Promise<ApiResponse> => {
        const text = await res.text();
        return { status: res.status, headers: res.headers, body: JSON.parse(text) as unknown, text };
      };
      const ok = await toApi(
        await form(`grant_type=client_credentials&client_id=${partner.clientId}&client_secret=${encodeURIComponent(partner.clientSecret)}`),
      );
      expect(ok.status).to.equal(200);
      openapi.check("POST", "/oauth/token", ok);
      const bad = await toApi(await form(`grant_type=client_credentials&client_id=${partner.clientId}&client_secret=wrong`));
      expect(bad.status).to.equal(401);
      openapi.check("POST", "/oauth/token", bad);
      openapi.check("POST", "/oauth/token", await toApi(await form("grant_type=password")));
      // The server ignores parameters it does not know (RFC 6749 3.2), and the document says so.
      const extra = await toApi(
        await form(`grant_type=client_credentials&client_id=${partner.clientId}&client_secret=${encodeURIComponent(partner.clientSecret)}&audience=x`),
      );
      expect(extra.status).to.equal(200);
      const tokenDoc = openapi.doc.paths["/oauth/token"]!.post as unknown as {
        requestBody: { content: Record<string, { schema: { additionalProperties: unknown } }> };
      };
      expect(tokenDoc.requestBody.content["application/x-www-form-urlencoded"]!.schema.additionalProperties).to.equal(true);
      for (const path of Object.keys(openapi.doc.paths)) expect(path).to.match(/^\/(oauth\/token|users|events|treasury|openapi\.json)/);
    });
  });

  describe("pre-create (POST /users)", () => {
    it("is idempotent per partner and e-mail: 201 then 200 with the same user_id", async () => {
      const partner = await createPartner(stack);
      const token = await mintPartnerToken(stack, partner);
      const email = `pc-${Date.now()}-${Math.random().toString(16).slice(2)}@example.com`;
      const first = await call("POST", "/users", { token, json: { email } });
      expect(first.status).to.equal(201);
      const { user_id, created } = first.body as { user_id: string; created: boolean };
      expect(created).to.equal(true);
      const again = await call("POST", "/users", { token, json: { email: email.toUpperCase() } });
      expect(again.status).to.equal(200);
      expect(again.body).to.deep.equal({ user_id, created: false });
      // Another partner's first pre-create is 201 too: `created` never reveals other partners.
      const other = await createPartner(stack);
      const theirs = await call("POST", "/users", { token: await mintPartnerToken(stack, other), json: { email } });
      expect(theirs.status).to.equal(201);
      expect(theirs.body).to.deep.equal({ user_id, created: true });
      const rows = await auditRows(first.headers.get("x-request-id")!);
      expect(rows.map((r) => [r.action, r.subject])).to.deep.equal([["partner.users.create", user_id]]);
    });

    it("partners and the operator creating one e-mail at once make one user with one root vault", async () => {
      const partners = await Promise.all(Array.from({ length: 8 }, () => createPartner(stack)));
      const tokens = await Promise.all(partners.map((p) => mintPartnerToken(stack, p)));
      const email = `race-${randomUUID()}@example.com`;
      const [viaApi, viaAdmin] = await Promise.all([
        Promise.all(tokens.map((token) => call("POST", "/users", { token, json: { email } }))),
        Promise.all(Array.from({ length: 4 }, () => stack.admin.partners.createUser({ email }))),
      ]);
      expect(viaApi.map((r) => r.status)).to.deep.equal(Array(8).fill(201));
      const userIds = new Set([...viaApi.map((r) => (r.body as { user_id: string }).user_id), ...viaAdmin.map((r) => r.userId)]);
      expect(userIds.size).to.equal(1);
      expect(new Set(viaAdmin.map((r) => r.vaultId)).size).to.equal(1);
      const { db } = await testDatabase();
      const { rows } = await db.raw(`SELECT id FROM vaults WHERE owner_user_id = ? AND parent_vault_id IS NULL`, [[...userIds][0]]);
      expect((rows as { id: string }[]).map((r) => String(r.id))).to.deep.equal([viaAdmin[0]!.vaultId]);
    });

    it("refuses unknown fields, bad JSON, non-JSON and bodies over 4096 bytes", async () => {
      const partner = await createPartner(stack);
      const token = await mintPartnerToken(stack, partner);
      expectHttpError(await call("POST", "/users", { token, json: { email: "a@example.com", role: "admin" } }), 400, "invalid_request");
      expectHttpError(await call("POST", "/users", { token, rawBody: '{"email":' }), 400, "invalid_json");
      expectHttpError(
        await call("POST", "/users", { token, rawBody: "email=a@example.com", headers: { "content-type": "application/x-www-form-urlencoded" } }),
        400,
        "invalid_request",
      );
      expectHttpError(await call("POST", "/users", { token, json: { email: 42 } }), 400, "invalid_request");
      expectHttpError(await call("POST", "/users", { token, json: { email: "not-an-address" } }), 400, "invalid_request");
      const big = { email: `${"a".repeat(4100)}@example.com` };
      expectHttpError(await call("POST", "/users", { token, json: big }), 413, "body_too_large");
    });

    it("answers 503 audit_unavailable without creating anything, and the retry answers as the first call would", async () => {
      const partner = await createPartner(stack);
      const token = await mintPartnerToken(stack, partner);
      const email = `audit-${Math.random().toString(16).slice(2)}@example.com`;
      auditBroken = true;
      const failed = await call("POST", "/users", { token, json: { email } });
      expectHttpError(failed, 503, "audit_unavailable");
      expect(failed.text).to.not.include("disk full");
      auditBroken = false;
      const retry = await call("POST", "/users", { token, json: { email } });
      expect(retry.status).to.equal(201);
      expect((retry.body as { created: boolean }).created).to.equal(true);
      const repeat = await call("POST", "/users", { token, json: { email } });
      expect(repeat.body).to.deep.equal({ user_id: (retry.body as { user_id: string }).user_id, created: false });
    });
  });

  describe("bearer verification", () => {
    it("401 invalid_token with WWW-Authenticate: Bearer for missing, garbage and forged tokens", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      expectHttpError(await call("GET", `/users/${userId}/kyc`), 401, "invalid_token");
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token: "abc.def.ghi" }), 401, "invalid_token");
      const token = await mintPartnerToken(stack, partner);
      const [h, p, s] = token.split(".");
      const forgedClaims = Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p!, "base64url").toString()), scope: "kyc:read treasury:write" })).toString(
        "base64url",
      );
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token: `${h}.${forgedClaims}.${s}` }), 401, "invalid_token");
      const noneHeader = Buffer.from(JSON.stringify({ alg: "none", typ: "at+jwt" })).toString("base64url");
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token: `${noneHeader}.${p}.` }), 401, "invalid_token");
    });

    it("reads the header as RFC 6750 writes it: the scheme in any case, then one or more spaces", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      for (const authorization of [`Bearer ${token}`, `bearer ${token}`, `Bearer   ${token}`]) {
        expect((await call("GET", `/users/${userId}/kyc`, { headers: { authorization } })).status, authorization.slice(0, 9)).to.equal(200);
      }
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { headers: { authorization: `Bearer\t${token}` } }), 401, "invalid_token");
    });

    it("checks alg, typ, iss, aud and a lifetime of at most one hour", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const now = Math.floor(stack.clock().getTime() / 1000);
      const good = {
        iss: TEST_ISSUER,
        aud: TEST_AUDIENCE,
        sub: partner.clientId,
        client_id: partner.clientId,
        scope: "kyc:read",
        jti: crypto.randomUUID(),
        iat: now,
        nbf: now,
        exp: now + 3600,
      };
      const sign = (header: Record<string, unknown>, claims: Record<string, unknown>) => stack.core.keyring.signJwt(header, claims);
      expect((await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "at+jwt" }, good) })).status).to.equal(200);
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "JWT" }, { ...good, jti: crypto.randomUUID() }) }), 401, "invalid_token");
      expectHttpError(
        await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "at+jwt" }, { ...good, iss: "https://evil.example" }) }),
        401,
        "invalid_token",
      );
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "at+jwt" }, { ...good, aud: "urn:other" }) }), 401, "invalid_token");
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "at+jwt" }, { ...good, exp: now + 3601 }) }), 401, "invalid_token");
      expectHttpError(
        await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "at+jwt" }, { ...good, client_id: "gpc_other_00000000" }) }),
        401,
        "invalid_token",
      );
      expectHttpError(
        await call("GET", `/users/${userId}/kyc`, { token: sign({ typ: "at+jwt" }, { ...good, nbf: now + 120, iat: now + 120, exp: now + 3700 }) }),
        401,
        "invalid_token",
      );
    });

    it("honours 30 s of clock skew after exp and no more, also for a cached token", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      expect((await call("GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
      stack.clock.advance((3600 + 29) * 1000);
      expect((await call("GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
      stack.clock.advance(2000);
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token }), 401, "invalid_token");
    });
  });

  describe("access checks, in order", () => {
    it("partner suspended -> 403 partner_inactive at once, before anything about the user", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      expect((await call("GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token }), 403, "partner_inactive");
      expectHttpError(await call("GET", `/users/${crypto.randomUUID()}/kyc`, { token }), 403, "partner_inactive");
      expectHttpError(await call("GET", `/events`, { token }), 403, "partner_inactive");
      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
      expect((await call("GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
    });

    it("user unknown to this partner (incl. another partner's user) -> 404 user_not_found", async () => {
      const partner = await createPartner(stack);
      const other = await createPartner(stack);
      const theirs = await createUserFor(stack, other);
      const token = await mintPartnerToken(stack, partner);
      const res = await call("GET", `/users/${theirs.userId}/kyc`, { token });
      expectHttpError(res, 404, "user_not_found");
      const unknown = await call("GET", `/users/${crypto.randomUUID()}/kyc`, { token });
      expectHttpError(unknown, 404, "user_not_found");
      expect((res.body as { error: { message: string } }).error.message).to.equal((unknown.body as { error: { message: string } }).error.message);
      expectHttpError(await call("GET", `/users/not-a-uuid/kyc`, { token }), 400, "invalid_request");
    });

    it("user inactive -> 403 user_inactive; then consent and token scope must both cover the resource", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner, ["wallet:read"]);
      const token = await mintPartnerToken(stack, partner);
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token }), 403, "grant_required");
      expect((await call("GET", `/users/${userId}/wallets`, { token })).status).to.equal(200);
      const narrow = await mintPartnerToken(stack, partner, "kyc:read");
      expectHttpError(await call("GET", `/users/${userId}/wallets`, { token: narrow }), 403, "grant_required");
      await stack.admin.partnerResources.setUserStatus({ userId, status: "inactive" });
      expectHttpError(await call("GET", `/users/${userId}/wallets`, { token }), 403, "user_inactive");
      await stack.admin.partnerResources.setUserStatus({ userId, status: "active" });
      await stack.admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId });
      expectHttpError(await call("GET", `/users/${userId}/wallets`, { token }), 403, "grant_required");
    });

    it("a pre-created user without consent is known (grant_required, not user_not_found)", async () => {
      const partner = await createPartner(stack);
      const token = await mintPartnerToken(stack, partner);
      const created = await call("POST", "/users", { token, json: { email: `r-${Math.random().toString(16).slice(2)}@example.com` } });
      const userId = (created.body as { user_id: string }).user_id;
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token }), 403, "grant_required");
    });

    it("treasury:write is never a consent scope", async () => {
      const partner = await createPartner(stack, { entitlements: ["kyc:read", "treasury:write"] });
      const { userId } = await createUserFor(stack, partner, ["kyc:read"]);
      await expectRefused(
        stack.admin.partnerResources.grantConsent({ clientId: partner.clientId, userId, scopes: { scopes: ["treasury:write"] } }),
        Reason.INVALID_REQUEST,
        /never a consent/,
      );
      const token = await mintPartnerToken(stack, partner, "treasury:write");
      expectHttpError(await call("GET", `/users/${userId}/kyc`, { token }), 403, "grant_required");
    });
  });

  describe("reads and audit", () => {
    it("every read writes its audit row (same request id) before data leaves; a failed audit withholds the data", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      await stack.admin.partnerResources.addWallet({ userId, chain: "eth", address: "0x52908400098527886E0F7030069857D2E4169EE7" });
      for (const chain of ["eth", "sol"])
        await expectRefused(
          stack.admin.partnerResources.addWallet({ userId, chain, address: "not-an-address" }),
          Reason.INVALID_REQUEST,
          new RegExp(`^address is not a valid ${chain} address$`),
        );
      const token = await mintPartnerToken(stack, partner);
      const ok = await call("GET", `/users/${userId}/wallets`, { token });
      expect(ok.body).to.deep.equal({ user_id: userId, wallets: [{ chain: "eth", address: "0x52908400098527886E0F7030069857D2E4169EE7" }] });
      const rows = await auditRows(ok.headers.get("x-request-id")!);
      expect(rows.map((r) => [r.actor, r.action, r.subject])).to.deep.equal([[`partner:${partner.clientId}`, "partner.wallets.read", userId]]);

      auditBroken = true;
      for (const path of ["wallets", "kyc", "us-account", "transfers"]) {
        const res = await call("GET", `/users/${userId}/${path}`, { token });
        expectHttpError(res, 503, "audit_unavailable");
        expect(res.text).to.not.include("0x5290");
      }
      expectHttpError(await call("GET", `/events`, { token }), 503, "audit_unavailable");
      auditBroken = false;
    });

    it("a refusal whose audit row cannot be written fails closed: 503 audit_unavailable, not the refusal", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
      const refused = await call("GET", `/users/${userId}/kyc`, { token });
      expectHttpError(refused, 403, "partner_inactive");
      const rows = await auditRows(refused.headers.get("x-request-id")!);
      expect(rows.map((r) => r.reason)).to.deep.equal(["partner_inactive"]);
      auditBroken = true;
      try {
        expectHttpError(await call("GET", `/users/${userId}/kyc`, { token }), 503, "audit_unavailable");
      } finally {
        auditBroken = false;
      }
    });

    it("serves KYC, US account and wallets", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      const before = await call("GET", `/users/${userId}/kyc`, { token });
      expect(before.body).to.include({ user_id: userId, status: "not_started", provider: null });
      await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
      expect((await call("GET", `/users/${userId}/kyc`, { token })).body).to.include({ status: "approved", provider: "sandbox" });
      const none = await call("GET", `/users/${userId}/us-account`, { token });
      expect(none.body).to.include({ status: "not_provisioned", bank_name: null });
      await stack.admin.partnerResources.provisionUsAccount({ userId });
      const acct = await call("GET", `/users/${userId}/us-account`, { token });
      expect(acct.body).to.include({ status: "provisioned", routing_number: "021000021", account_type: "checking" });
      expectHttpError(await call("GET", `/users/${userId}/kyc?x=1`, { token }), 400, "invalid_request");
    });

    it("hosted verification link: 201, 409 kyc_provider_conflict, 400 unknown provider", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      const link = await call("POST", `/users/${userId}/kyc/link`, { token, json: { redirect_uri: "https://partner.example/done" } });
      expect(link.status).to.equal(201);
      expect((link.body as { url: string }).url).to.match(/^https:\/\//);
      expect((link.body as { provider: string }).provider).to.equal("sandbox");
      expect((await call("POST", `/users/${userId}/kyc/link`, { token })).status).to.equal(201);
      expectHttpError(await call("POST", `/users/${userId}/kyc/link`, { token, json: { provider: "nope" } }), 400, "invalid_request");
      expectHttpError(await call("POST", `/users/${userId}/kyc/link`, { token, json: { extra: 1 } }), 400, "invalid_request");
      const disguised = { redirect_uri: "https://partner.example@evil.example/done" };
      expectHttpError(await call("POST", `/users/${userId}/kyc/link`, { token, json: disguised }), 400, "invalid_request");
      await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "acme-id" });
      expectHttpError(await call("POST", `/users/${userId}/kyc/link`, { token, json: {} }), 409, "kyc_provider_conflict");
    });

    it("a redirect_uri within its 2048 characters gets its link, though escaping it in the link makes the link longer", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      // Every "/" is "%2F" in the link's query: this one grows to about 6000 characters there.
      const redirectUri = `https://partner.example/${"a/".repeat(1012)}`;
      expect(redirectUri.length).to.equal(2048);
      const link = await call("POST", `/users/${userId}/kyc/link`, { token, json: { redirect_uri: redirectUri } });
      expect(link.status, link.text).to.equal(201);
      expect(new URL((link.body as { url: string }).url).searchParams.get("redirect_uri")).to.equal(redirectUri);
    });
  });
});
