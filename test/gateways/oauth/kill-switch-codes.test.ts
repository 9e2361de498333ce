import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { codeExchangeForm, consentCode, createJar, createUser, formFields } from "../../support/agent-oauth.js";
import { postRpc } from "../../support/mcp.js";
import { expectOAuthError } from "../../support/refusals.js";

/** The kill switch also ends consents not yet exchanged: a code approved before it mints nothing after it. */
describe("kill switch and authorization codes not yet exchanged", () => {
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
});
