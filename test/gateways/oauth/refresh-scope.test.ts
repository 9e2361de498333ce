import { expect } from "chai";
import { decodeJwt } from "jose";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createUser, oauthGrant, postForm, registerClient, vaultUrn, verifyReason } from "../../support/agent-oauth.js";
import { basic } from "../../support/partners.js";
import { ownerSession } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { expectJsonRpcError, expectOAuthError } from "../../support/refusals.js";

type Creds = { client_id: string; client_secret: string };
const GIVEN = "accounts:read audit:stream";

/**
 * A refresh's optional `scope` (RFC 6749 6) and `resource` (RFC 8707): never more than the
 * lineage was given, never another vault, the same on the token endpoint and agent.grant.refresh.
 */
describe("agent OAuth: scope and resource on refresh", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const refreshRes = (client: Creds, refreshToken: string, extra: Record<string, string | string[]> = {}) => {
    const body = new URLSearchParams({ grant_type: "refresh_token", refresh_token: refreshToken });
    for (const [k, v] of Object.entries(extra)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
    return fetch(`${stack.url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(client.client_id, client.client_secret) },
      body: body.toString(),
    });
  };
  const refresh = async (client: Creds, refreshToken: string, extra: Record<string, string | string[]> = {}) => {
    const res = await refreshRes(client, refreshToken, extra);
    return { status: res.status, body: (await res.json()) as Record<string, string> };
  };
  const grantScopes = async (accessToken: string) => (await stack.clients.grants.verifyAgentToken({ accessToken })).grant!.scopes;

  it("a narrower scope limits the new access token; a later refresh without scope gets back all the lineage was given", async () => {
    const { token, client, user } = await oauthGrant(stack, { scope: GIVEN });
    const narrow = await refresh(client, token.body.refresh_token as string, { scope: "accounts:read" });
    expect(narrow.status).to.equal(200);
    expect(narrow.body.scope).to.equal("accounts:read");
    expect(decodeJwt(narrow.body.access_token!).scope).to.equal("accounts:read");
    expect(await grantScopes(narrow.body.access_token!)).to.deep.equal(["accounts:read"]);
    // The owner's dashboard shows what the agent can still reach, not the narrower token.
    const agentId = (decodeJwt(narrow.body.access_token!).act as { sub: string }).sub;
    const { agent } = await stack.clients.grants.getAgent({ sessionToken: await ownerSession(stack, user.userId), agentId });
    expect(agent!.grants.filter((g) => g.state === "active").map((g) => g.scopes)).to.deep.equal([["accounts:read", "audit:stream"]]);
    // The narrowing is this access token's only: the refresh token still stands for the whole grant.
    const other = await refresh(client, narrow.body.refresh_token!, { scope: "audit:stream" });
    expect([other.status, other.body.scope]).to.deep.equal([200, "audit:stream"]);
    const whole = await refresh(client, other.body.refresh_token!);
    expect([whole.status, whole.body.scope]).to.deep.equal([200, GIVEN]);
    expect(await grantScopes(whole.body.access_token!)).to.deep.equal(["accounts:read", "audit:stream"]);
    const same = await refresh(client, whole.body.refresh_token!, { scope: "audit:stream accounts:read" });
    expect([same.status, same.body.scope]).to.deep.equal([200, GIVEN]);
  });

  it("a scope the grant was not given, or a malformed one, is 400 invalid_scope and uses nothing up", async () => {
    const { token, client } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    await expectOAuthError(await refreshRes(client, rt, { scope: "accounts:read payments:initiate" }), 400, "invalid_scope");
    await expectOAuthError(await refreshRes(client, rt, { scope: "agent:budget:create" }), 400, "invalid_scope");
    await expectOAuthError(await refreshRes(client, rt, { scope: "accounts:read  audit:stream" }), 400, "invalid_scope");
    expect(await verifyReason(stack, token.body.access_token as string)).to.equal("ok");
    // Narrowed once, the lineage may still not widen beyond what it was given.
    const narrow = await refresh(client, rt, { scope: "accounts:read" });
    expect(narrow.status).to.equal(200);
    await expectOAuthError(await refreshRes(client, narrow.body.refresh_token!, { scope: `${GIVEN} payments:simulate` }), 400, "invalid_scope");
    expect(await verifyReason(stack, narrow.body.access_token!)).to.equal("ok");
    expect((await refresh(client, narrow.body.refresh_token!)).body.scope).to.equal(GIVEN);
  });

  it("resource: the grant's vault URN or the MCP server is taken; any other is 400 invalid_target and uses nothing up", async () => {
    const { token, client, user } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    const stranger = await createUser(stack);
    for (const resource of [
      vaultUrn(stranger.vaultId),
      "https://evil.example/mcp",
      "urn:vaultgate:vault:not-a-uuid",
      [vaultUrn(user.vaultId), vaultUrn(stranger.vaultId)],
    ]) {
      await expectOAuthError(await refreshRes(client, rt, { resource }), 400, "invalid_target");
    }
    expect(await verifyReason(stack, token.body.access_token as string)).to.equal("ok");
    const own = await refresh(client, rt, { resource: [vaultUrn(user.vaultId.toUpperCase()), stack.url] });
    expect(own.status).to.equal(200);
    expect(decodeJwt(own.body.access_token!).aud).to.deep.equal([stack.url, vaultUrn(user.vaultId)]);
  });

  it("hostile: another client learns nothing from scope or resource, and a used token with either still revokes its lineage", async () => {
    const { token, client, user } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    const thief = (await registerClient(stack)).body;
    // The answer is the one for any token not the thief's, whatever it asks for.
    expect((await refresh(thief, rt, { scope: "payments:initiate" })).body.error).to.equal("invalid_grant");
    expect((await refresh(thief, rt, { resource: vaultUrn(user.vaultId) })).body.error).to.equal("invalid_grant");
    const r1 = await refresh(client, rt, { scope: "accounts:read" });
    expect(r1.status).to.equal(200);
    // A lost answer's retry gets the same pair; the used token asking for something else gets nothing.
    const retry = await refresh(client, rt, { scope: "accounts:read" });
    expect([retry.body.jti, retry.body.refresh_token]).to.deep.equal([r1.body.jti, r1.body.refresh_token]);
    expect((await refresh(client, rt, { scope: GIVEN })).body.error).to.equal("invalid_grant");
    expect((await refresh(client, rt)).body.error).to.equal("invalid_grant");
    expect(await verifyReason(stack, r1.body.access_token!)).to.equal("ok");
    stack.clock.advance(31_000);
    const reuse = await refresh(client, rt, { scope: "payments:initiate" });
    expect(reuse.body.error).to.equal("invalid_grant");
    expect(await verifyReason(stack, r1.body.access_token!)).to.equal(Reason.INVALID_TOKEN);
    expect((await refresh(client, r1.body.refresh_token!)).body.error).to.equal("invalid_grant");
  });

  it("hostile: a used token in the grace window asking beyond the grant is invalid_grant, like any used token, and revokes nothing", async () => {
    const { token, client } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    const stranger = await createUser(stack);
    const r1 = await refresh(client, rt);
    expect(r1.status).to.equal(200);
    await expectOAuthError(await refreshRes(client, rt, { scope: "payments:initiate" }), 400, "invalid_grant");
    await expectOAuthError(await refreshRes(client, rt, { resource: vaultUrn(stranger.vaultId) }), 400, "invalid_grant");
    expect(await verifyReason(stack, r1.body.access_token!)).to.equal("ok");
    const retry = await refresh(client, rt);
    expect([retry.body.jti, retry.body.refresh_token]).to.deep.equal([r1.body.jti, r1.body.refresh_token]);
  });

  it("many refreshes of one token at once, asking for different scopes, issue one successor", async () => {
    const { token, client, user } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    const asks: Record<string, string>[] = [
      { scope: "accounts:read" },
      {},
      { scope: "audit:stream" },
      { scope: "accounts:read" },
      {},
      { resource: vaultUrn(user.vaultId) },
    ];
    const results = await Promise.all([...asks, ...asks].map((extra) => refresh(client, rt, extra)));
    const ok = results.filter((r) => r.status === 200);
    expect(ok.length).to.be.at.least(1);
    expect(new Set(ok.map((r) => r.body.jti)).size).to.equal(1);
    expect(new Set(ok.map((r) => r.body.scope)).size).to.equal(1);
    for (const r of results.filter((x) => x.status !== 200)) expect([r.status, r.body.error]).to.deep.equal([400, "invalid_grant"]);
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM grants WHERE user_id = ? AND state = 'active'`, [user.userId]);
    expect(rows[0].n).to.equal(1);
    expect(await verifyReason(stack, ok[0]!.body.access_token!)).to.equal("ok");
  });

  it("agent.grant.refresh takes the same scope and resource, with the same rules", async () => {
    const { token, client, user } = await oauthGrant(stack, { scope: GIVEN });
    const call = (args: Record<string, unknown>) =>
      postRpc(`${stack.url}/mcp/treasury`, {
        jsonrpc: "2.0",
        id: 1,
        method: "agent.grant.refresh",
        params: { client_id: client.client_id, client_secret: client.client_secret, ...args },
      });
    const rt = token.body.refresh_token as string;
    expectJsonRpcError(await call({ refresh_token: rt, scope: "payments:initiate" }), -32602, "invalid_scope");
    expectJsonRpcError(await call({ refresh_token: rt, resource: [vaultUrn((await createUser(stack)).vaultId)] }), -32602, "invalid_target");
    const narrow = await call({ refresh_token: rt, scope: "audit:stream", resource: [vaultUrn(user.vaultId)] });
    expect(narrow.json!.result.scope).to.equal("audit:stream");
    const whole = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: narrow.json!.result.refresh_token,
      client_id: client.client_id,
      client_secret: client.client_secret,
    });
    expect([whole.status, whole.body.scope]).to.deep.equal([200, GIVEN]);
  });
});
