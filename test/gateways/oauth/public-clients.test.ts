import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { consentCode, createJar, createUser, postForm, REDIRECT, registerClient, verifyReason } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { expectOAuthError } from "../../support/refusals.js";

const PUBLIC = { token_endpoint_auth_method: "none" };

/** A client registered with token_endpoint_auth_method none: no secret, PKCE and its client_id bind its tokens. */
describe("public clients registered at /oauth2/register", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true });
  });
  after(() => stack?.close());

  const token = (form: Record<string, string>) => postForm(`${stack.url}/oauth2/token`, form);
  const tokenRes = (form: Record<string, string>) =>
    fetch(`${stack.url}/oauth2/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(form) });
  const exchange = (c: { client: { client_id: string }; code: string; verifier: string }) => ({
    grant_type: "authorization_code",
    code: c.code,
    redirect_uri: REDIRECT,
    code_verifier: c.verifier,
    client_id: c.client.client_id,
  });
  const consent = async () => consentCode(stack, await createUser(stack), createJar(stack.url), { register: PUBLIC });

  it("registers without a secret, then exchanges, refreshes and revokes with its client_id alone", async () => {
    const registered = await registerClient(stack, PUBLIC);
    expect(registered.status).to.equal(201);
    expect(registered.body).to.include({ token_endpoint_auth_method: "none" });
    expect(registered.body).to.not.have.any.keys("client_secret", "client_secret_expires_at");

    const c = await consent();
    const first = await token(exchange(c));
    expect(first.status).to.equal(200);
    const refreshed = await token({ grant_type: "refresh_token", refresh_token: first.body.refresh_token as string, client_id: c.client.client_id });
    expect(refreshed.status).to.equal(200);
    const access = refreshed.body.access_token as string;
    expect(await verifyReason(stack, access)).to.equal("ok");
    const revoked = await postForm(`${stack.url}/oauth2/revoke`, { token: refreshed.body.refresh_token as string, client_id: c.client.client_id });
    expect(revoked.status).to.equal(200);
    expect(await verifyReason(stack, access)).to.not.equal("ok");
  });

  it("hostile: a secret from a public client, and another public client's code, refresh token or revocation, are refused", async () => {
    const victim = await consent();
    const attacker = (await registerClient(stack, PUBLIC)).body;
    await expectOAuthError(await tokenRes({ ...exchange(victim), client_secret: "ags_guess" }), 401, "invalid_client");
    await expectOAuthError(await tokenRes({ ...exchange(victim), client_id: attacker.client_id }), 400, "invalid_grant");
    const grant = await token(exchange(victim));
    expect(grant.status).to.equal(200);
    const refresh = grant.body.refresh_token as string;
    await expectOAuthError(await tokenRes({ grant_type: "refresh_token", refresh_token: refresh, client_id: attacker.client_id }), 400, "invalid_grant");
    const foreign = await postForm(`${stack.url}/oauth2/revoke`, { token: refresh, client_id: attacker.client_id });
    expect(foreign.status).to.not.equal(200);
    expect(await verifyReason(stack, grant.body.access_token as string)).to.equal("ok");
    // A client registered with a secret still needs it.
    const confidential = await consentCode(stack, await createUser(stack), createJar(stack.url));
    await expectOAuthError(await tokenRes(exchange(confidential)), 401, "invalid_client");
  });

  it("hostile: a used code sent again without its PKCE verifier is refused and revokes nothing; with it, the replay revokes", async () => {
    const c = await consent();
    const grant = await token(exchange(c));
    expect(grant.status).to.equal(200);
    // Anyone who saw the redirect has the code, and a public client's client_id is no secret.
    for (const verifier of ["x".repeat(43), "short"]) {
      await expectOAuthError(await tokenRes({ ...exchange(c), code_verifier: verifier }), 400, "invalid_grant");
    }
    expect(await verifyReason(stack, grant.body.access_token as string)).to.equal("ok");
    await expectOAuthError(await tokenRes(exchange(c)), 400, "invalid_grant");
    expect(await verifyReason(stack, grant.body.access_token as string)).to.not.equal("ok");
  });

  it("PostgreSQL only: 12 concurrent exchanges of one public client's code issue exactly one grant", async function () {
    requirePostgres(this, "racing code exchanges need several connections");
    const c = await consent();
    const answers = await Promise.all(Array.from({ length: 12 }, () => token(exchange(c))));
    expect(answers.filter((a) => a.status === 200)).to.have.length(1);
    for (const a of answers.filter((x) => x.status !== 200)) expect([a.status, a.body.error]).to.deep.equal([400, "invalid_grant"]);
  });

  it("PostgreSQL only: 12 concurrent replays of a used code without its verifier revoke nothing", async function () {
    requirePostgres(this, "racing replays need several connections");
    const c = await consent();
    const grant = await token(exchange(c));
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => token({ ...exchange(c), code_verifier: `${i}`.padEnd(43, "v") })));
    for (const a of answers) expect([a.status, a.body.error]).to.deep.equal([400, "invalid_grant"]);
    expect(await verifyReason(stack, grant.body.access_token as string)).to.equal("ok");
  });
});
