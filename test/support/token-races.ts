import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { postForm, verifyReason } from "./agent-oauth.js";
import { postRpc } from "./mcp.js";
import { basic } from "./partners.js";
import { expectJsonRpcError, expectToolError } from "./refusals.js";
import type { TestStack } from "./stack.js";

export type Creds = { client_id: string; client_secret: string };
/** A token answer as the HTTP endpoint gave it. */
export type TokenAnswer = Awaited<ReturnType<typeof postForm>>;

/** POST /oauth2/token refreshing `refreshToken` as `client` (HTTP Basic), with any extra fields. */
export const refreshHttp = (stack: TestStack, client: Creds, refreshToken: string, extra: Record<string, string> = {}) =>
  postForm(
    `${stack.url}/oauth2/token`,
    { grant_type: "refresh_token", refresh_token: refreshToken, ...extra },
    { authorization: basic(client.client_id, client.client_secret) },
  );

/** POST /oauth2/revoke of `token` as `client`: the raw response. */
export const revokeHttp = (stack: TestStack, client: Creds, token: string) =>
  fetch(`${stack.url}/oauth2/revoke`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(client.client_id, client.client_secret) },
    body: new URLSearchParams({ token }).toString(),
  });

/** MCP tools/call of accounts.balance with `accessToken` as the bearer. */
export const balanceCall = (stack: TestStack, accessToken: string) =>
  postRpc(
    `${stack.url}/mcp/read`,
    { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "accounts.balance", arguments: {} } },
    { authorization: `Bearer ${accessToken}` },
  );

/** MCP tools/call of agent.grant.refresh (no bearer). */
export const refreshTool = (stack: TestStack, client: Creds, refreshToken: string) =>
  postRpc(`${stack.url}/mcp/treasury`, {
    jsonrpc: "2.0",
    id: 1,
    method: "tools/call",
    params: { name: "agent.grant.refresh", arguments: { refresh_token: refreshToken, client_id: client.client_id, client_secret: client.client_secret } },
  });

/** Every surface refuses `accessToken`: core's verification, and an MCP tools/call answers 401 invalid_token. */
export async function expectAccessDead(stack: TestStack, accessToken: string): Promise<void> {
  expect(await verifyReason(stack, accessToken)).to.equal(Reason.INVALID_TOKEN);
  const res = await balanceCall(stack, accessToken);
  expect(res.status, res.text).to.equal(401);
  expectJsonRpcError(res, -32001, "invalid_token");
}

/** Every surface refuses `refreshToken`: the token endpoint answers invalid_grant, the MCP refresh tool -32001 invalid_grant. */
export async function expectRefreshDead(stack: TestStack, client: Creds, refreshToken: string): Promise<void> {
  const http = await refreshHttp(stack, client, refreshToken);
  expect({ status: http.status, error: http.body.error }).to.deep.equal({ status: 400, error: "invalid_grant" });
  const tool = await refreshTool(stack, client, refreshToken);
  expect(tool.status, tool.text).to.equal(200);
  expectToolError(tool.json!.result, -32001, "invalid_grant");
}

/** An access token that works: core verifies it and tools/call answers a balance. */
export async function expectAccessLive(stack: TestStack, accessToken: string): Promise<void> {
  expect(await verifyReason(stack, accessToken)).to.equal("ok");
  const res = await balanceCall(stack, accessToken);
  expect(res.status, res.text).to.equal(200);
  expect(res.json!.result.isError, res.text).to.not.equal(true);
}

/** The states of every grant of a lineage, by the lineage of the grant `jti`. */
export async function lineageStates(stack: TestStack, jti: string): Promise<string[]> {
  const { rows } = await stack.core.db.raw(`SELECT state FROM grants WHERE lineage_id = (SELECT lineage_id FROM grants WHERE id = ?) ORDER BY id`, [jti]);
  return (rows as { state: string }[]).map((r) => r.state);
}

/** What one refresh answered, whichever surface it went through: the tokens, or the OAuth error. */
export type RefreshOutcome = { ok: true; access_token: string; refresh_token: string; jti: string } | { ok: false; error: string; status: number };

/**
 * A refresh through the token endpoint or the MCP agent.grant.refresh tool, normalized. Any answer
 * other than tokens or an OAuth refusal (a 5xx, an internal error) fails the test.
 */
export async function refreshVia(stack: TestStack, via: "http" | "tool", client: Creds, refreshToken: string): Promise<RefreshOutcome> {
  if (via === "http") {
    const res = await refreshHttp(stack, client, refreshToken);
    if (res.status === 200) return { ok: true, ...(res.body as { access_token: string; refresh_token: string; jti: string }) };
    expect(res.status, JSON.stringify(res.body)).to.be.oneOf([400, 401]);
    return { ok: false, error: String(res.body.error), status: res.status };
  }
  const res = await refreshTool(stack, client, refreshToken);
  expect(res.status, res.text).to.equal(200);
  expect(res.json!.error, res.text).to.equal(undefined);
  const result = res.json!.result;
  if (!result.isError) return { ok: true, ...(result.structuredContent as { access_token: string; refresh_token: string; jti: string }) };
  const e = result._meta.error as { code: number; data: { reason_id: string } };
  expect(e.code, res.text).to.equal(-32001);
  return { ok: false, error: e.data.reason_id, status: 400 };
}
