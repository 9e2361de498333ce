import { expect } from "chai";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { startStack, type TestStack } from "../support/stack.js";
import { authorize, createJar, createUser } from "../support/agent-oauth.js";
import { beginSdkAuthorization, createSdkOAuthProvider } from "../support/mcp-sdk-oauth.js";
import { thrownBy } from "../support/refusals.js";

/**
 * A grant too narrow for a tool: HTTP 403 with an insufficient_scope challenge naming the
 * endpoint's scopes, which the stock MCP SDK client follows to authorize again for them.
 */
describe("MCP SDK client: the insufficient_scope challenge", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true });
  });
  after(() => stack.close());

  const queryOf = (url: URL) => {
    const query: Record<string, string | string[]> = {};
    for (const [k, v] of url.searchParams) query[k] = k in query ? [...[query[k]!].flat(), v] : v;
    return query;
  };

  it("a grant without audit:stream gets 403 on audit.list; the SDK re-authorizes for the endpoint's scopes and the call then succeeds", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    // No refresh_token grant: on the challenge the SDK goes straight to a new authorization.
    const provider = createSdkOAuthProvider({ grantTypes: ["authorization_code"] });
    const endpoint = new URL(`${stack.url}/mcp/read`);

    const { transport: first, authorizationUrl } = await beginSdkAuthorization(endpoint, provider);
    const narrow = { ...queryOf(authorizationUrl), scope: "accounts:read" };
    await first.finishAuth((await authorize(stack, jar, user.email, narrow)).searchParams.get("code")!);
    expect(provider.saved?.scope).to.equal("accounts:read");

    const raw = await fetch(endpoint, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${provider.saved!.access_token}` },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "audit.list", arguments: {} } }),
    });
    expect(raw.status).to.equal(403);
    expect(raw.headers.get("www-authenticate")).to.equal(
      `Bearer resource_metadata="${stack.url}/.well-known/oauth-protected-resource/mcp/read", scope="accounts:read audit:stream", error="insufficient_scope"`,
    );
    const body = (await raw.json()) as { error: { code: number; data: { reason_id: string } } };
    expect([body.error.code, body.error.data.reason_id]).to.deep.equal([-32002, "insufficient_scope"]);

    const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
    const client = new Client({ name: "host", version: "1" });
    await client.connect(transport);
    expect((await client.callTool({ name: "accounts.balance", arguments: {} })).isError).to.equal(false);
    provider.authorizationUrl = undefined;
    expect(await thrownBy(client.callTool({ name: "audit.list", arguments: {} }))).to.be.instanceOf(UnauthorizedError);
    const again = provider.authorizationUrl as URL | undefined;
    expect(again?.searchParams.get("scope")?.split(" ").sort()).to.deep.equal(["accounts:read", "audit:stream"]);

    await transport.finishAuth((await authorize(stack, jar, user.email, queryOf(again!))).searchParams.get("code")!);
    expect(provider.saved?.scope?.split(" ").sort()).to.deep.equal(["accounts:read", "audit:stream"]);
    const listed = await client.callTool({ name: "audit.list", arguments: {} });
    expect(listed.isError).to.equal(false);
    expect(listed.structuredContent).to.have.property("records");
    await client.close();
  });
});
