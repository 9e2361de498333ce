import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn } from "../../support/agent-oauth.js";

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Issue 5: "bad or tampered parameters give a clear page, never a stack trace". Addresses
 * that are not valid percent-encoding on the page surface get an HTML 400 page; the JSON
 * surfaces keep their JSON answers.
 */
describe("web pages: malformed percent-encoding gives a clear HTML page", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  async function expectBadAddressPage(res: Response, status = 400) {
    const text = await res.text();
    expect(res.status, text.slice(0, 200)).to.equal(status);
    expect(res.headers.get("content-type")).to.equal("text/html; charset=utf-8");
    expect(res.headers.get("x-request-id")).to.match(UUID_RE);
    expect(res.headers.get("cache-control")).to.equal("no-store");
    expect(res.headers.get("x-frame-options")).to.equal("DENY");
    expect(res.headers.get("content-security-policy")).to.include("default-src 'none'");
    expect(res.headers.get("referrer-policy")).to.equal("same-origin");
    expect(text).to.match(/^<!doctype html>/);
    expect(text).to.not.include("<script");
    // No framework internals, no echo of the bad input, no stack.
    expect(text).to.not.match(/FST_|statusCode|not a valid url component|at \S+ \(|%E0|%ZZ|%ff/i);
    return text;
  }

  const PATHS = ["/dashboard/agents/%E0%A4%A", "/dashboard/%ff", "/dashboard/approvals/payments/%ZZ", "/signin/%E0%A4%A", "/oauth2/authorize/%ff"];
  for (const path of PATHS) {
    it(`GET ${path} (path not valid percent-encoding) -> 400 page`, async () => {
      const text = await expectBadAddressPage(await fetch(stack.url + path, { redirect: "manual" }));
      expect(text).to.include("<title>Something is wrong with this request · Vaultgate</title>");
      expect(text).to.include("The address contains characters that are not allowed.");
    });
  }

  const QUERIES = [
    "/oauth2/authorize?client_id=%ZZ",
    "/oauth2/authorize?response_type=code&client_id=agc_x&state=%E0%A4%A",
    "/dashboard/agents?payment=%ZZ",
    "/signin?return_to=%E0%A4%A",
    "/stepup?return_to=%",
  ];
  for (const path of QUERIES) {
    it(`GET ${path} (query not valid percent-encoding) -> 400 page`, async () => {
      const text = await expectBadAddressPage(await fetch(stack.url + path, { redirect: "manual" }));
      expect(text).to.include("The address contains characters that are not allowed.");
    });
  }

  it("POST to a page path with a malformed address -> 400 page, and the handler never runs", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const issued = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] });
    // A valid CSRF token: had the route run, it would have revoked every grant.
    const fields = formFields(await (await jar.get("/dashboard/agents")).text(), "/dashboard/kill-switch");
    const res = await jar.request("/dashboard/kill-switch?x=%ZZ", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(fields as Record<string, string>).toString(),
    });
    await expectBadAddressPage(res);
    await stack.clients.grants.verifyAgentToken({ accessToken: issued.token!.accessToken });
  });

  it("an over-long id on a page is the page's own answer: signed out a sign-in redirect, signed in a not-found page", async () => {
    const long = "a".repeat(3000);
    for (const path of [`/dashboard/agents/${long}`, `/dashboard/approvals/payments/${long}`, "/dashboard/approvals/budgets/x"]) {
      const out = await fetch(`${stack.url}${path}`, { redirect: "manual" });
      expect([out.status, out.headers.get("location")], path.slice(0, 40)).to.deep.equal([303, `/signin?return_to=${encodeURIComponent("/dashboard/agents")}`]);
    }
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    for (const [path, says] of [
      [`/dashboard/agents/${long}`, "There is no such agent."],
      [`/dashboard/approvals/payments/${long}`, "payment"],
    ] as const) {
      const res = await jar.get(path);
      const text = await res.text();
      expect(res.status, text.slice(0, 200)).to.equal(404);
      expect(res.headers.get("content-type")).to.equal("text/html; charset=utf-8");
      expect(res.headers.get("x-request-id")).to.match(UUID_RE);
      expect(text).to.include(says).and.not.include(long);
    }
  });

  it("a page address beyond the request-header limit is refused with a 4xx, never a 5xx", async () => {
    const res = await fetch(`${stack.url}/dashboard/agents/${"a".repeat(20_000)}`, { redirect: "manual" });
    expect(res.status).to.equal(431);
  });

  it("signed in, a malformed agent address still gets the page (not a sign-in redirect or JSON)", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    await expectBadAddressPage(await jar.get("/dashboard/agents/%E0%A4%A"));
  });

  it("the partner API answers a malformed path in its envelope: the bearer first (401 without one), request_id, no-store", async () => {
    for (const path of ["/api/partner/users/%ZZ/kyc", "/api/partner/users/%FF/kyc"]) {
      const res = await fetch(stack.url + path);
      expect(res.status, path.slice(0, 40)).to.equal(401);
      expect(res.headers.get("cache-control")).to.equal("no-store");
      const requestId = res.headers.get("x-request-id");
      expect(requestId).to.match(UUID_RE);
      expect(await res.json()).to.deep.equal({ error: { code: "invalid_token", message: "a bearer access token is required", request_id: requestId } });
    }
  });

  it("other JSON surfaces keep fastify's JSON 400 for a malformed path", async () => {
    for (const path of ["/oauth2/token/%ff", "/mcp/read/%E0%A4%A"]) {
      const res = await fetch(stack.url + path);
      expect(res.status).to.equal(400);
      expect(res.headers.get("content-type")).to.match(/^application\/json/);
      expect(res.headers.get("x-request-id")).to.match(UUID_RE);
      expect(await res.json()).to.deep.equal({
        error: "Bad Request",
        code: "FST_ERR_BAD_URL",
        message: `'${path}' is not a valid url component`,
        statusCode: 400,
      });
    }
  });

  it("a page path prefix inside another word is not a page (/signinx, /dashboards)", async () => {
    for (const path of ["/signinx/%ff", "/dashboards/%ff"]) {
      const res = await fetch(stack.url + path);
      expect(res.status).to.equal(400);
      expect(res.headers.get("content-type")).to.match(/^application\/json/);
    }
  });

  it("an unknown address under a page prefix -> HTML 404 page; elsewhere fastify's JSON 404", async () => {
    for (const path of ["/dashboard/foo", "/dashboard/agents/x/y/z", "/signin/extra"]) {
      const res = await fetch(stack.url + path, { redirect: "manual" });
      const text = await res.text();
      expect(res.status, path).to.equal(404);
      expect(res.headers.get("content-type")).to.equal("text/html; charset=utf-8");
      expect(res.headers.get("x-request-id")).to.match(UUID_RE);
      expect(res.headers.get("content-security-policy")).to.include("default-src 'none'");
      expect(text).to.include("<title>Page not found · Vaultgate</title>");
      expect(text).to.not.include(path);
    }
    const api = await fetch(`${stack.url}/no-such-thing`);
    expect(api.status).to.equal(404);
    expect(api.headers.get("content-type")).to.match(/^application\/json/);
    expect(await api.json()).to.deep.equal({ message: "Route GET:/no-such-thing not found", error: "Not Found", statusCode: 404 });
  });

  it("well-formed queries are unaffected (+, %20, UTF-8)", async () => {
    const res = await fetch(`${stack.url}/signin?return_to=%2Fdashboard%2Fagents&x=a+b%20%C3%A9`, { redirect: "manual" });
    expect(res.status).to.equal(200);
    expect(await res.text()).to.include("Sign in");
  });
});
