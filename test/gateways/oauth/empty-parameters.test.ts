import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import {
  authorize,
  codeExchangeForm,
  consentCode,
  createJar,
  createUser,
  pkce,
  postForm,
  REDIRECT,
  registerClient,
  vaultUrn,
} from "../../support/agent-oauth.js";
import { basic } from "../../support/partners.js";
import { expectOAuthError } from "../../support/refusals.js";

/** RFC 6749 3.1 and 3.2: a parameter sent without a value is treated as if it were omitted. */
describe("OAuth parameters sent without a value count as omitted", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const token = (form: Record<string, string>, headers: Record<string, string> = {}) => postForm(`${stack.url}/oauth2/token`, form, headers);

  it("at /oauth2/authorize: an empty state is not echoed, an empty resource names nothing", async () => {
    const user = await createUser(stack);
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT] })).body;
    const { verifier, challenge } = pkce();
    const q = { response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: challenge, code_challenge_method: "S256" };
    const back = await authorize(stack, createJar(stack.url), user.email, { ...q, scope: "accounts:read", state: "", resource: ["", vaultUrn(user.vaultId)] });
    expect(back.searchParams.has("code"), back.href).to.equal(true);
    expect(back.searchParams.has("state"), back.href).to.equal(false);
    const res = await token(codeExchangeForm({ client, code: back.searchParams.get("code")!, verifier }));
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
  });

  it("at /oauth2/token: an empty resource, scope or client_secret beside Basic credentials changes nothing", async () => {
    const c = await consentCode(stack, await createUser(stack), createJar(stack.url));
    const first = await token(codeExchangeForm(c, { resource: "" }));
    expect(first.status, JSON.stringify(first.body)).to.equal(200);
    const refreshed = await token(
      { grant_type: "refresh_token", refresh_token: first.body.refresh_token as string, scope: "", resource: "", client_secret: "" },
      { authorization: basic(c.client.client_id, c.client.client_secret) },
    );
    expect(refreshed.status, JSON.stringify(refreshed.body)).to.equal(200);
    // A value that is there is still judged: a resource of someone else's vault.
    const other = await createUser(stack);
    const narrowed = await fetch(`${stack.url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "refresh_token",
        refresh_token: refreshed.body.refresh_token as string,
        resource: vaultUrn(other.vaultId),
        client_id: c.client.client_id,
        client_secret: c.client.client_secret,
      }),
    });
    await expectOAuthError(narrowed, 400, "invalid_target");
  });
});
