import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError, type OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js";
import { startStack, type TestStack } from "../support/stack.js";
import { authorize, createJar, createUser } from "../support/agent-oauth.js";

/** An in-memory OAuthClientProvider: what an MCP host keeps per server. */
function createProvider(): OAuthClientProvider & { authorizationUrl?: URL; client?: OAuthClientInformationMixed; saved?: OAuthTokens } {
  let verifier = "";
  const redirect = "http://127.0.0.1:9/callback";
  const state = randomBytes(8).toString("hex");
  const provider = {
    authorizationUrl: undefined as URL | undefined,
    client: undefined as OAuthClientInformationMixed | undefined,
    saved: undefined as OAuthTokens | undefined,
    get redirectUrl() {
      return redirect;
    },
    get clientMetadata(): OAuthClientMetadata {
      return {
        client_name: "MCP SDK test host",
        redirect_uris: [redirect],
        grant_types: ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_post",
        scope: "accounts:read audit:stream",
      };
    },
    state: () => state,
    clientInformation: () => provider.client,
    saveClientInformation: (info: OAuthClientInformationMixed) => {
      provider.client = info;
    },
    tokens: () => provider.saved,
    saveTokens: (t: OAuthTokens) => {
      provider.saved = t;
    },
    redirectToAuthorization: (url: URL) => {
      provider.authorizationUrl = url;
    },
    saveCodeVerifier: (v: string) => {
      verifier = v;
    },
    codeVerifier: () => verifier,
  };
  return provider;
}

/**
 * The MCP SDK client's own OAuth support against our servers: the 401 challenge leads it
 * to the protected-resource metadata, then the authorization server; it registers, sends
 * the user to authorize (pages driven over HTTP here), exchanges the code and calls tools.
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
    const provider = createProvider();
    const endpoint = new URL(`${stack.url}/mcp/read`);

    const first = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
    let refused: unknown;
    await new Client({ name: "host", version: "1" }).connect(first).catch((err: unknown) => (refused = err));
    expect(refused).to.be.instanceOf(UnauthorizedError);
    expect(provider.client).to.have.property("client_id");
    const url = provider.authorizationUrl!;
    expect(url.origin + url.pathname).to.equal(`${stack.url}/oauth2/authorize`);
    expect(url.searchParams.get("code_challenge_method")).to.equal("S256");

    const query: Record<string, string | string[]> = {};
    for (const [k, v] of url.searchParams) query[k] = k in query ? [...[query[k]!].flat(), v] : v;
    const back = await authorize(stack, createJar(stack.url), user.email, query);
    const code = back.searchParams.get("code");
    expect(code).to.be.a("string");
    await first.finishAuth(code!);
    expect(provider.saved?.access_token).to.be.a("string");

    const client = new Client({ name: "host", version: "1" });
    await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: provider }));
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).to.deep.equal(["accounts.balance", "audit.list"]);
    const balance = await client.callTool({ name: "accounts.balance", arguments: {} });
    expect(balance.structuredContent).to.deep.equal({ vault_id: user.vaultId, balance_cents: 4_200, currency: "USD" });
    await client.close();
  });
});
