import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize as consent, createJar, createUser, pkce, REDIRECT, registerClient } from "../../support/agent-oauth.js";

/**
 * The form of the authorization request itself (RFC 6749 4.1.1 and 4.1.2.1): a missing
 * response_type, a response mode or request object we do not support are refused back to
 * the verified redirect URI, never silently answered some other way.
 */
describe("authorize: the form of the request", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let clientId: string;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
    clientId = (await registerClient(stack, { redirect_uris: [REDIRECT], scope: "accounts:read" })).body.client_id;
  });
  after(() => stack?.close());

  const query = (extra: Record<string, string | undefined>, base: Record<string, string> = {}) => {
    const q: Record<string, string | undefined> = {
      response_type: "code",
      client_id: clientId,
      redirect_uri: REDIRECT,
      code_challenge: pkce().challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      state: "st",
      ...base,
      ...extra,
    };
    return new URLSearchParams(Object.entries(q).filter((e): e is [string, string] => e[1] !== undefined));
  };
  const get = (q: URLSearchParams) => fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual" });

  /** The refusal sent back to the client: its redirect URI, with error, state and iss in the query. */
  async function refusedBack(q: URLSearchParams) {
    const res = await get(q);
    expect(res.status, q.toString()).to.equal(303);
    const location = res.headers.get("location")!;
    expect(location.startsWith(`${REDIRECT}?`), location).to.equal(true);
    expect(location, "no fragment response").to.not.include("#");
    const back = new URL(location);
    expect([back.searchParams.get("state"), back.searchParams.get("iss")]).to.deep.equal(["st", stack.issuer]);
    return { error: back.searchParams.get("error"), description: back.searchParams.get("error_description") ?? "" };
  }

  it("a missing response_type is invalid_request; an unsupported one stays unsupported_response_type (RFC 6749 4.1.2.1)", async () => {
    for (const response_type of [undefined, ""]) {
      const r = await refusedBack(query({ response_type }));
      expect(r.error).to.equal("invalid_request");
      expect(r.description).to.match(/response_type is required/);
    }
    expect((await refusedBack(query({ response_type: "token" }))).error).to.equal("unsupported_response_type");
  });

  it("a response_mode other than query is refused with invalid_request, in the query, not answered as a query response", async () => {
    for (const response_mode of ["fragment", "form_post", "query.jwt", "QUERY"]) {
      const r = await refusedBack(query({ response_mode }));
      expect(r.error, response_mode).to.equal("invalid_request");
      expect(r.description, response_mode).to.match(/response_mode/);
    }
  });

  it("request and request_uri are refused as request_not_supported and request_uri_not_supported", async () => {
    const r = await refusedBack(query({ request: "eyJhbGciOiJub25lIn0.e30." }));
    expect(r.error).to.equal("request_not_supported");
    const u = await refusedBack(query({ request_uri: "urn:ietf:params:oauth:request_uri:abc" }));
    expect(u.error).to.equal("request_uri_not_supported");
  });

  it("the request's own form is judged before its scope, PKCE or resource", async () => {
    const bad = { scope: "payments:initiate", code_challenge_method: "plain" };
    const missing = await refusedBack(query({ ...bad, response_type: undefined }));
    expect([missing.error, missing.description]).to.deep.equal(["invalid_request", "response_type is required"]);
    const mode = await refusedBack(query({ ...bad, response_mode: "fragment" }));
    expect(mode.error).to.equal("invalid_request");
    expect(mode.description).to.match(/response_mode/);
  });

  it("hostile: with an unknown client or an unregistered redirect_uri the same requests are a page, never a redirect", async () => {
    for (const extra of [{ response_mode: "fragment" }, { response_type: undefined }, { request: "x.y.z" }, { request_uri: "https://attacker.example/r" }]) {
      const pairs: Record<string, string>[] = [{ client_id: "agc_nosuchclient" }, { redirect_uri: "https://attacker.example/cb" }];
      for (const pair of pairs) {
        const res = await get(query(extra, pair));
        expect(res.status, JSON.stringify({ extra, pair })).to.equal(400);
        expect(res.headers.get("location")).to.equal(null);
      }
    }
  });

  it("response_mode=query is the default spelled out: the flow completes with a code in the query", async () => {
    const user = await createUser(stack);
    const q = Object.fromEntries(query({ response_mode: "query" }));
    const back = await consent(stack, createJar(stack.url), user.email, q);
    expect(back.origin + back.pathname).to.equal(REDIRECT);
    expect(back.searchParams.get("code")).to.match(/^vgc_/);
    expect(back.hash).to.equal("");
  });

  it("the metadata says request objects are not supported (absent, OpenID Connect Discovery assumes request_uri is)", async () => {
    const m = (await (await fetch(`${stack.url}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    expect([m.request_parameter_supported, m.request_uri_parameter_supported]).to.deep.equal([false, false]);
    expect(m.response_modes_supported).to.deep.equal(["query"]);
  });
});
