import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";
import { authorize, createJar, createUser } from "../support/agent-oauth.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { beginSdkAuthorization, connectSdkClient, createSdkOAuthProvider } from "../support/mcp-sdk-oauth.js";

/**
 * The MCP SDK client's own OAuth against our servers, from the 401 challenge through discovery,
 * registration, authorization (pages driven over HTTP) and the code exchange to tool calls.
 */
describe("MCP SDK client OAuth against {mcp_url} and {auth_url}", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true });
  });
  after(() => stack.close());

  it("discovers, registers, completes the code flow and calls tools with the grant", async () => {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 4_200n });
    const provider = createSdkOAuthProvider();
    const endpoint = new URL(`${stack.url}/mcp/read`);

    const { transport: first, authorizationUrl: url } = await beginSdkAuthorization(endpoint, provider);
    expect(provider.client).to.have.property("client_id");
    expect(url.origin + url.pathname).to.equal(`${stack.url}/oauth2/authorize`);
    expect(url.searchParams.get("code_challenge_method")).to.equal("S256");

    const query: Record<string, string | string[]> = {};
    for (const [k, v] of url.searchParams) query[k] = k in query ? [...[query[k]!].flat(), v] : v;
    const back = await authorize(stack, createJar(stack.url), user.email, query);
    const code = back.searchParams.get("code");
    expect(code).to.be.a("string");
    await first.finishAuth(code!);
    expect(provider.saved?.access_token).to.be.a("string");

    const client = await connectSdkClient(endpoint, provider);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).to.deep.equal(["payments.get", "accounts.balance", "audit.list"]);
    const balance = await client.callTool({ name: "accounts.balance", arguments: {} });
    expect(balance.structuredContent).to.deep.equal({ vault_id: user.vaultId, balance_cents: 4_200, currency: "USD" });
    await client.close();

    // The SDK's own refresh names the protected resource (RFC 8707): it is taken, and the grant rotates.
    const sent: URLSearchParams[] = [];
    const fetchFn: typeof fetch = async (input, init) => {
      if (String(input).endsWith("/oauth2/token")) sent.push(new URLSearchParams(String(init?.body)));
      return fetch(input, init);
    };
    const before = provider.saved!;
    expect(await auth(provider, { serverUrl: endpoint, fetchFn })).to.equal("AUTHORIZED");
    expect(sent.map((b) => [b.get("grant_type"), b.getAll("resource")])).to.deep.equal([["refresh_token", [endpoint.href]]]);
    expect(provider.saved!.refresh_token).to.not.equal(before.refresh_token);
    expect(provider.saved!.scope).to.equal(before.scope);
    const again = await connectSdkClient(endpoint, provider);
    expect((await again.callTool({ name: "accounts.balance", arguments: {} })).structuredContent).to.have.property("balance_cents", 4_200);
    await again.close();
  });

  it("registers as a public client (no secret) and authorizes, calls tools and refreshes with its client_id alone", async () => {
    const user = await createUser(stack);
    const provider = createSdkOAuthProvider({ authMethod: "none", redirectUrl: "http://127.0.0.1:51873/callback" });
    const endpoint = new URL(`${stack.url}/mcp/read`);
    const { transport, authorizationUrl: url } = await beginSdkAuthorization(endpoint, provider);
    expect(provider.client).to.include({ token_endpoint_auth_method: "none" });
    expect(provider.client).to.not.have.property("client_secret");

    const query: Record<string, string | string[]> = {};
    for (const [k, v] of url.searchParams) query[k] = k in query ? [...[query[k]!].flat(), v] : v;
    const back = await authorize(stack, createJar(stack.url), user.email, query);
    await transport.finishAuth(back.searchParams.get("code")!);
    const first = provider.saved!;
    expect(first.refresh_token).to.be.a("string");

    const sent: URLSearchParams[] = [];
    const fetchFn: typeof fetch = async (input, init) => {
      if (String(input).endsWith("/oauth2/token")) sent.push(new URLSearchParams(String(init?.body)));
      return fetch(input, init);
    };
    expect(await auth(provider, { serverUrl: endpoint, fetchFn })).to.equal("AUTHORIZED");
    expect(sent.map((b) => [b.get("grant_type"), b.get("client_id"), b.has("client_secret")])).to.deep.equal([
      ["refresh_token", provider.client!.client_id, false],
    ]);
    expect(provider.saved!.refresh_token).to.not.equal(first.refresh_token);
    const client = await connectSdkClient(endpoint, provider);
    expect((await client.callTool({ name: "accounts.balance", arguments: {} })).structuredContent).to.include({ vault_id: user.vaultId });
    await client.close();
  });
});
