import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient } from "../../support/agent-oauth.js";

const REDIRECT = "http://127.0.0.1:9/callback";
const INVALID_GRANT_CODE = { error: "invalid_grant", error_description: "the authorization code is invalid, expired or already used" };
const INVALID_GRANT_REFRESH = { error: "invalid_grant", error_description: "the refresh token is invalid, expired or revoked" };

/**
 * Issue 5 gap: the token endpoint must not issue tokens for a user whose account is no
 * longer active (users.status). RFC 6749 5.2: the grant is no longer valid -> invalid_grant.
 */
describe("token endpoint: inactive users get no tokens (RFC 6749 5.2 invalid_grant)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const setStatus = (userId: string, status: "active" | "inactive") => stack.admin.partnerResources.setUserStatus({ userId, status });

  async function codeFor() {
    const user = await createUser(stack);
    const client = (await registerClient(stack)).body;
    const p = pkce();
    const back = await authorize(stack, createJar(stack.url), user.email, {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: p.challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      resource: `urn:vaultgate:vault:${user.vaultId}`,
      state: "s",
    });
    const exchange = {
      grant_type: "authorization_code",
      code: back.searchParams.get("code")!,
      redirect_uri: REDIRECT,
      code_verifier: p.verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
    };
    return { user, client, exchange };
  }

  async function tokensFor() {
    const { user, client, exchange } = await codeFor();
    const res = await postForm(`${stack.url}/oauth2/token`, exchange);
    expect(res.status).to.equal(200);
    return { user, client, tokens: res.body as { refresh_token: string; jti: string; access_token: string } };
  }

  const refresh = (client: { client_id: string; client_secret: string }, refreshToken: string) =>
    postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: refreshToken,
      client_id: client.client_id,
      client_secret: client.client_secret,
    });

  it("refuses a code exchange once the user is inactive, without using the code up", async () => {
    const { user, exchange } = await codeFor();
    await setStatus(user.userId, "inactive");
    const refused = await postForm(`${stack.url}/oauth2/token`, exchange);
    expect(refused.status).to.equal(400);
    expect(refused.body).to.deep.equal(INVALID_GRANT_CODE);
    expect(refused.headers.get("cache-control")).to.equal("no-store");
    // Nothing was written: after reactivation (within the code's 60 s) the same code works once.
    await setStatus(user.userId, "active");
    const ok = await postForm(`${stack.url}/oauth2/token`, exchange);
    expect(ok.status).to.equal(200);
    expect(ok.body).to.have.property("access_token");
  });

  it("refuses the slow-path exchange (resource names the vault) for an inactive user too", async () => {
    const { user, exchange } = await codeFor();
    await setStatus(user.userId, "inactive");
    const refused = await postForm(`${stack.url}/oauth2/token`, { ...exchange, resource: `urn:vaultgate:vault:${user.vaultId}` });
    expect(refused.status).to.equal(400);
    expect(refused.body).to.deep.equal(INVALID_GRANT_CODE);
    await setStatus(user.userId, "active");
    expect((await postForm(`${stack.url}/oauth2/token`, { ...exchange, resource: `urn:vaultgate:vault:${user.vaultId}` })).status).to.equal(200);
  });

  it("refuses a refresh once the user is inactive, and the refresh token survives reactivation", async () => {
    const { user, client, tokens } = await tokensFor();
    await setStatus(user.userId, "inactive");
    const refused = await refresh(client, tokens.refresh_token);
    expect(refused.status).to.equal(400);
    expect(refused.body).to.deep.equal(INVALID_GRANT_REFRESH);
    // The refusal rotated nothing and revoked nothing: the old grant is still the live one.
    await setStatus(user.userId, "active");
    const ok = await refresh(client, tokens.refresh_token);
    expect(ok.status).to.equal(200);
    expect(ok.body.jti).to.not.equal(tokens.jti);
  });

  it("does not hand back the successor pair of a grace-window retry to an inactive user", async () => {
    const { user, client, tokens } = await tokensFor();
    const first = await refresh(client, tokens.refresh_token);
    expect(first.status).to.equal(200);
    await setStatus(user.userId, "inactive");
    const retry = await refresh(client, tokens.refresh_token);
    expect(retry.status).to.equal(400);
    expect(retry.body).to.deep.equal(INVALID_GRANT_REFRESH);
    // The lineage was not revoked as reuse: reactivated, the retry still gets the same pair.
    await setStatus(user.userId, "active");
    const again = await refresh(client, tokens.refresh_token);
    expect(again.status).to.equal(200);
    expect(again.body.jti).to.equal(first.body.jti);
  });
});
