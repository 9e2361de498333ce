import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, codeExchangeForm, consentCode, createJar, createUser, formFields, pkce, postForm, REDIRECT, vaultUrn } from "../../support/agent-oauth.js";
import { postRpc } from "../../support/mcp.js";
import { expectOAuthError } from "../../support/refusals.js";

/** Revocations also end consents not yet exchanged: a code approved before one mints nothing after it. */
describe("revocations and authorization codes not yet exchanged", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  /** A consent approved over the pages: its code (unexchanged), verifier and client, and the user's signed-in jar. */
  async function approvedCode(user: Awaited<ReturnType<typeof createUser>>, jar = createJar(stack.url)) {
    const form = codeExchangeForm(await consentCode(stack, user, jar));
    const exchange = () =>
      fetch(`${stack.url}/oauth2/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(form) });
    return { jar, exchange };
  }

  const activeGrants = async (userId: string) => (await stack.core.db("grants").where({ user_id: userId, state: "active" })).length;

  it("killSwitch.all: a code approved before it is refused at the exchange (invalid_grant) and nothing is active", async () => {
    const user = await createUser(stack);
    const pending = await approvedCode(user);
    const killer = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] });
    const killed = await postRpc(
      `${stack.url}/mcp/treasury`,
      { jsonrpc: "2.0", id: 1, method: "killSwitch.all", params: {} },
      { authorization: `Bearer ${killer.token!.accessToken}` },
    );
    expect(killed.json!.result.revoked).to.equal(1);
    await expectOAuthError(await pending.exchange(), 400, "invalid_grant");
    expect(await activeGrants(user.userId)).to.equal(0);
  });

  it("the dashboard's kill switch: the same, and another user's codes still exchange", async () => {
    const user = await createUser(stack);
    const other = await createUser(stack);
    const pending = await approvedCode(user);
    const untouched = await approvedCode(other);
    const dash = await (await pending.jar.get("/dashboard/agents")).text();
    expect((await pending.jar.post("/dashboard/kill-switch", formFields(dash, "/dashboard/kill-switch"))).status).to.equal(303);
    await expectOAuthError(await pending.exchange(), 400, "invalid_grant");
    expect(await activeGrants(user.userId)).to.equal(0);
    expect((await untouched.exchange()).status).to.equal(200);
  });

  it("the dashboard's revoke of one grant: that agent's unexchanged code is refused, another agent's still exchanges", async () => {
    const user = await createUser(stack);
    const first = await consentCode(stack, user, createJar(stack.url));
    const granted = await postForm(`${stack.url}/oauth2/token`, codeExchangeForm(first));
    expect(granted.status).to.equal(200);
    // The same client is approved again; its code is not exchanged before the revoke.
    const jar = createJar(stack.url);
    const { verifier, challenge } = pkce();
    const again = await authorize(stack, jar, user.email, {
      response_type: "code",
      client_id: first.client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      resource: vaultUrn(user.vaultId),
      state: "again",
    });
    const pendingForm = codeExchangeForm({ client: first.client, code: again.searchParams.get("code")!, verifier });
    const other = await approvedCode(user, jar);

    const grant = await stack.core
      .db("grants")
      .where({ id: granted.body.jti as string })
      .first();
    const page = await (await jar.get(`/dashboard/agents/${grant.agent_principal_id}`)).text();
    const revoke = `/dashboard/agents/${grant.agent_principal_id}/grants/${grant.id}/revoke`;
    expect(page).to.include(revoke);
    expect((await jar.post(revoke, formFields(page, revoke))).status).to.equal(303);

    const pending = await fetch(`${stack.url}/oauth2/token`, { method: "POST", body: new URLSearchParams(pendingForm) });
    await expectOAuthError(pending, 400, "invalid_grant");
    expect((await other.exchange()).status).to.equal(200);
    const active = await stack.core.db("grants").where({ user_id: user.userId, state: "active" });
    expect(active.map((g) => g.client_id)).to.not.include(first.client.client_id);
    expect(active).to.have.length(1);
  });
});
