import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient } from "../../support/agent-oauth.js";
import { postRpc } from "../../support/mcp.js";

const REDIRECT = "http://127.0.0.1:9/callback";

/** agent.grant.refresh with a grant from the real code flow. */
describe("agent.grant.refresh over JSON-RPC", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true });
  });
  after(() => stack.close());

  it("exchanges the refresh token for a new grant; the old jti is superseded and refused", async () => {
    const user = await createUser(stack);
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT] })).body;
    const { challenge, verifier } = pkce();
    const back = await authorize(stack, createJar(stack.url), user.email, {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      resource: `urn:vaultgate:vault:${user.vaultId}`,
      state: "s",
    });
    const token = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "authorization_code",
      code: back.searchParams.get("code")!,
      redirect_uri: REDIRECT,
      code_verifier: verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
    });
    expect(token.status).to.equal(200);
    const old = token.body.access_token as string;

    const refreshed = await postRpc(`${stack.url}/mcp/treasury`, {
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: {
        name: "agent.grant.refresh",
        arguments: { refresh_token: token.body.refresh_token, client_id: client.client_id, client_secret: client.client_secret },
      },
    });
    expect(refreshed.status).to.equal(200);
    const next = refreshed.json!.result.structuredContent;
    expect([next.token_type, next.expires_in, next.scope]).to.deep.equal(["Bearer", 3600, "accounts:read"]);
    expect(next.jti).to.not.equal(token.body.jti);

    const withOld = await postRpc(`${stack.url}/mcp/read`, { jsonrpc: "2.0", id: 2, method: "accounts.balance" }, { authorization: `Bearer ${old}` });
    expect(withOld.status).to.equal(401);
    const withNew = await postRpc(
      `${stack.url}/mcp/read`,
      { jsonrpc: "2.0", id: 3, method: "accounts.balance" },
      { authorization: `Bearer ${next.access_token}` },
    );
    expect(withNew.json!.result.vault_id).to.equal(user.vaultId);

    const wrongSecret = await postRpc(`${stack.url}/mcp/treasury`, {
      jsonrpc: "2.0",
      id: 4,
      method: "agent.grant.refresh",
      params: { refresh_token: next.refresh_token, client_id: client.client_id, client_secret: "wrong-secret" },
    });
    expect(wrongSecret.json!.error.code).to.equal(-32001);
    // client_secret may be left out (public clients have none), but a registered client
    // without its secret is refused like a wrong one, and nothing is used up.
    const noSecret = await postRpc(`${stack.url}/mcp/treasury`, {
      jsonrpc: "2.0",
      id: 5,
      method: "agent.grant.refresh",
      params: { refresh_token: next.refresh_token, client_id: client.client_id },
    });
    expect([noSecret.json!.error.code, noSecret.json!.error.data.reason_id]).to.deep.equal([-32001, "invalid_client"]);
    const stillGood = await postRpc(`${stack.url}/mcp/treasury`, {
      jsonrpc: "2.0",
      id: 6,
      method: "agent.grant.refresh",
      params: { refresh_token: next.refresh_token, client_id: client.client_id, client_secret: client.client_secret },
    });
    expect(stillGood.json!.result.jti).to.be.a("string");
  });
});
