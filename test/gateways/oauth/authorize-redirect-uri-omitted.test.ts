import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, pkce, postForm, REDIRECT, registerClient } from "../../support/agent-oauth.js";

const OTHER = "https://app.example/cb";

/**
 * RFC 6749 3.1.2.3: a client that registered one redirect URI may leave redirect_uri out of
 * the authorization request; with several it must name one. RFC 6749 4.1.3: the code
 * exchange then names it only if the authorization request did.
 */
describe("authorize: redirect_uri left out", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const request = (clientId: string, extra: Record<string, string> = {}) => ({
    response_type: "code",
    client_id: clientId,
    code_challenge: "",
    code_challenge_method: "S256",
    scope: "accounts:read",
    state: "st",
    ...extra,
  });
  /** Consent without redirect_uri; the code and what its exchange needs. */
  async function codeWithout(client: { client_id: string }, extra: Record<string, string> = {}) {
    const { verifier, challenge } = pkce();
    const user = await createUser(stack);
    const back = await authorize(stack, createJar(stack.url), user.email, request(client.client_id, { code_challenge: challenge, ...extra }));
    return { back, code: back.searchParams.get("code")!, verifier };
  }
  const exchange = (client: { client_id: string; client_secret: string }, c: { code: string; verifier: string }, extra: Record<string, string> = {}) =>
    postForm(`${stack.url}/oauth2/token`, {
      grant_type: "authorization_code",
      code: c.code,
      code_verifier: c.verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
      ...extra,
    });

  it("one registered URI: the code goes to it, and is exchanged without redirect_uri or naming that URI", async () => {
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT] })).body;
    const first = await codeWithout(client);
    expect(first.back.origin + first.back.pathname).to.equal(REDIRECT);
    expect([first.back.searchParams.get("state"), first.back.searchParams.get("iss")]).to.deep.equal(["st", stack.issuer]);
    const token = await exchange(client, first);
    expect(token.status, JSON.stringify(token.body)).to.equal(200);
    const second = await codeWithout(client);
    expect((await exchange(client, second, { redirect_uri: REDIRECT })).status).to.equal(200);
  });

  it("one registered URI: a refusal after the client is verified goes back to that URI", async () => {
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT], scope: "accounts:read" })).body;
    const q = new URLSearchParams(request(client.client_id, { code_challenge: pkce().challenge, scope: "payments:initiate" }));
    const res = await fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual" });
    expect(res.status).to.equal(303);
    const back = new URL(res.headers.get("location")!);
    expect(back.origin + back.pathname).to.equal(REDIRECT);
    expect([back.searchParams.get("error"), back.searchParams.get("state")]).to.deep.equal(["invalid_scope", "st"]);
  });

  it("several registered URIs: a page that says redirect_uri is required, never a redirect", async () => {
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT, OTHER] })).body;
    const cases: Record<string, string>[] = [{}, { redirect_uri: "" }, { scope: "payments:initiate" }];
    for (const extra of cases) {
      const q = new URLSearchParams(request(client.client_id, { code_challenge: pkce().challenge, ...extra }));
      const res = await fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual" });
      expect(res.status, JSON.stringify(extra)).to.equal(400);
      expect(res.headers.get("location")).to.equal(null);
      expect(res.headers.get("content-type")).to.match(/^text\/html/);
      expect(await res.text()).to.include("redirect_uri is required");
    }
  });

  it("hostile: a code asked for with redirect_uri is not exchanged without it, nor one asked for without it at another URI", async () => {
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT] })).body;
    const named = await codeWithout(client, { redirect_uri: REDIRECT });
    const missing = await exchange(client, named);
    expect([missing.status, missing.body.error]).to.deep.equal([400, "invalid_grant"]);
    // The refusal did not use the code up.
    expect((await exchange(client, named, { redirect_uri: REDIRECT })).status).to.equal(200);

    const loopback = (await registerClient(stack, { redirect_uris: ["http://127.0.0.1/callback"] })).body;
    const unnamed = await codeWithout(loopback);
    expect(unnamed.back.origin + unnamed.back.pathname).to.equal("http://127.0.0.1/callback");
    const elsewhere = await exchange(loopback, unnamed, { redirect_uri: "http://127.0.0.1:4711/callback" });
    expect([elsewhere.status, elsewhere.body.error]).to.deep.equal([400, "invalid_grant"]);
    expect((await exchange(loopback, unnamed)).status).to.equal(200);
  });
});
