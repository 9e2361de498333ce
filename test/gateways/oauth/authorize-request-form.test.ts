import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { pkce, REDIRECT, registerClient } from "../../support/agent-oauth.js";

/**
 * The form of the authorization request itself (RFC 6749 4.1.1 and 4.1.2.1): a missing
 * response_type is refused back to the verified redirect URI as invalid_request.
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

  it("the request's own form is judged before its scope, PKCE or resource", async () => {
    const bad = { scope: "payments:initiate", code_challenge_method: "plain" };
    const missing = await refusedBack(query({ ...bad, response_type: undefined }));
    expect([missing.error, missing.description]).to.deep.equal(["invalid_request", "response_type is required"]);
  });

  it("hostile: with an unknown client or an unregistered redirect_uri the same requests are a page, never a redirect", async () => {
    for (const extra of [{ response_type: undefined }, { response_type: "token" }]) {
      const pairs: Record<string, string>[] = [{ client_id: "agc_nosuchclient" }, { redirect_uri: "https://attacker.example/cb" }];
      for (const pair of pairs) {
        const res = await get(query(extra, pair));
        expect(res.status, JSON.stringify({ extra, pair })).to.equal(400);
        expect(res.headers.get("location")).to.equal(null);
      }
    }
  });
});
