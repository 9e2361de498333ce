import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { registerClient } from "../../support/agent-oauth.js";
import { expectOAuthError } from "../../support/refusals.js";

/** RFC 6749 5.2: the characters an error_description may hold. */
const DESCRIPTION = /^[\x20-\x21\x23-\x5B\x5D-\x7E]+$/;

/** A hostile caller names parameters with quotes, backslashes and non-ASCII letters; the answer's text stays within RFC 6749's set. */
describe("OAuth error descriptions hold only the characters RFC 6749 allows", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let auth: string;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
    const c = (await registerClient(stack)).body;
    auth = `client_id=${c.client_id}&client_secret=${c.client_secret}`;
  });
  after(() => stack?.close());

  const post = (path: string, body: string, type = "application/x-www-form-urlencoded") =>
    fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": type }, body });

  it("token and revocation endpoints: a repeated or NUL-holding parameter is named percent-encoded, a quote as an apostrophe", async () => {
    const cases: [string, string, string][] = [
      ["/oauth2/token", `grant_type=refresh_token&refresh_token=x&%22=1&%22=2&${auth}`, "repeated parameter: '"],
      ["/oauth2/token", `grant_type=refresh_token&refresh_token=x&caf%C3%A9=1&caf%C3%A9=2&${auth}`, "repeated parameter: caf%C3%A9"],
      ["/oauth2/token", `grant_type=refresh_token&refresh_token=x&%5Cn=%00&${auth}`, "%5Cn must not contain NUL characters"],
      ["/oauth2/revoke", `token=x&%F0%9F%99%82%22=%00&${auth}`, "%F0%9F%99%82' must not contain NUL characters"],
      ["/api/partner/oauth/token", "grant_type=client_credentials&%C3%A9=1&%C3%A9=2", "repeated parameter: %C3%A9"],
    ];
    for (const [path, body, description] of cases) {
      const res = await expectOAuthError(await post(path, body), 400, "invalid_request");
      expect(res.error_description, path).to.equal(description);
      expect(res.error_description).to.match(DESCRIPTION);
    }
  });

  it("registration: a field name the caller chose is percent-encoded in invalid_client_metadata", async () => {
    const body = JSON.stringify({ redirect_uris: ["https://a.example/cb"], 'é"\\': "\u0000" });
    const res = await expectOAuthError(await post("/oauth2/register", body, "application/json"), 400, "invalid_client_metadata");
    expect(res.error_description).to.equal("%C3%A9'%5C must not contain NUL characters");
    expect(res.error_description).to.match(DESCRIPTION);
  });
});
