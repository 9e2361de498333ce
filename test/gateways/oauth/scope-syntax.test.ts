import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { oauthGrant, pkce, REDIRECT, registerClient, verifyReason } from "../../support/agent-oauth.js";
import { basic } from "../../support/partners.js";
import { postRpc } from "../../support/mcp.js";
import { expectJsonRpcError, expectOAuthError } from "../../support/refusals.js";

type Creds = { client_id: string; client_secret: string };
const GIVEN = "accounts:read audit:stream";
/** Not RFC 6749 3.3 scope syntax: only spaces, or spaces around or doubled between tokens. */
const MALFORMED = [" ", "   ", "accounts:read  audit:stream", " accounts:read", "accounts:read ", "\t"];

/**
 * A scope parameter that is there but malformed is invalid_scope wherever a scope is read, never
 * "everything": only an absent one (or one sent without a value, RFC 6749 3.1) means the default.
 */
describe("agent OAuth: malformed scope strings", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const refreshRes = (client: Creds, refreshToken: string, scope?: string) =>
    fetch(`${stack.url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(client.client_id, client.client_secret) },
      body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: refreshToken, ...(scope === undefined ? {} : { scope }) }).toString(),
    });
  const rpc = (path: string, method: string, params: object, token?: string) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, token ? { authorization: `Bearer ${token}` } : {});

  it("refresh at the token endpoint: 400 invalid_scope, and the refresh token still works", async () => {
    const { token, client } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    for (const scope of MALFORMED) {
      const body = await expectOAuthError(await refreshRes(client, rt, scope), 400, "invalid_scope");
      expect(body.error_description, JSON.stringify(scope)).to.match(/scope/);
    }
    expect(await verifyReason(stack, token.body.access_token as string)).to.equal("ok");
    // Sent without a value, scope is as if omitted: everything the grant was given.
    const res = await refreshRes(client, rt, "");
    const body = (await res.json()) as Record<string, string>;
    expect([res.status, body.scope]).to.deep.equal([200, GIVEN]);
    const again = await refreshRes(client, body.refresh_token!);
    expect([again.status, ((await again.json()) as Record<string, string>).scope]).to.deep.equal([200, GIVEN]);
  });

  it("agent.grant.refresh and agent.grant.issue: -32602 invalid_scope, nothing rotated or superseded", async () => {
    const { token, client } = await oauthGrant(stack, { scope: GIVEN });
    const access = token.body.access_token as string;
    for (const scope of MALFORMED) {
      const creds = { client_id: client.client_id, client_secret: client.client_secret, refresh_token: token.body.refresh_token, scope };
      expectJsonRpcError(await rpc("/mcp/treasury", "agent.grant.refresh", creds), -32602, "invalid_scope");
      expectJsonRpcError(await rpc("/mcp/treasury", "agent.grant.issue", { scope }, access), -32602, "invalid_scope");
    }
    expect(await verifyReason(stack, access)).to.equal("ok");
    const issued = await rpc("/mcp/treasury", "agent.grant.issue", {}, access);
    expect(issued.json!.result.scope, issued.text).to.equal(GIVEN);
  });

  it("authorize sends invalid_scope back to the client; registration answers invalid_client_metadata", async () => {
    const client = (await registerClient(stack)).body;
    for (const scope of MALFORMED) {
      const q = { response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: pkce().challenge };
      const res = await fetch(`${stack.url}/oauth2/authorize?${new URLSearchParams({ ...q, code_challenge_method: "S256", scope, state: "s" })}`, {
        redirect: "manual",
      });
      expect(res.status, JSON.stringify(scope)).to.equal(303);
      expect(new URL(res.headers.get("location")!).searchParams.get("error"), JSON.stringify(scope)).to.equal("invalid_scope");
      const reg = await registerClient(stack, { scope });
      expect([reg.status, reg.body.error], JSON.stringify(scope)).to.deep.equal([400, "invalid_client_metadata"]);
    }
  });

  it("hostile: 30 refreshes of one token at once, most with a blank scope, issue one successor; each blank one is invalid_scope", async () => {
    const { token, client, user } = await oauthGrant(stack, { scope: GIVEN });
    const rt = token.body.refresh_token as string;
    const asks = Array.from({ length: 30 }, (_, i) => (i % 5 === 0 ? undefined : MALFORMED[i % MALFORMED.length]));
    const results = await Promise.all(asks.map(async (scope) => ({ scope, res: await refreshRes(client, rt, scope) })));
    const ok: Record<string, string>[] = [];
    for (const { scope, res } of results) {
      if (scope !== undefined) await expectOAuthError(res, 400, "invalid_scope");
      else if (res.status === 200) ok.push((await res.json()) as Record<string, string>);
      else await expectOAuthError(res, 400, "invalid_grant");
    }
    expect(ok.length).to.be.at.least(1);
    expect(new Set(ok.map((b) => b.jti)).size).to.equal(1);
    expect(ok[0]!.scope).to.equal(GIVEN);
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM grants WHERE user_id = ? AND state = 'active'`, [user.userId]);
    expect(rows[0].n).to.equal(1);
    // Another client asking with a blank scope learns nothing and spoils nothing.
    const thief = (await registerClient(stack)).body;
    await expectOAuthError(await refreshRes(thief, ok[0]!.refresh_token!, " "), 400, "invalid_scope");
    expect(await verifyReason(stack, ok[0]!.access_token!)).to.equal("ok");
  });
});
