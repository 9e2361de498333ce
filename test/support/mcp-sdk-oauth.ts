import { randomBytes } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError, type OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js";

export type SdkOAuthProvider = OAuthClientProvider & {
  authorizationUrl?: URL;
  client?: OAuthClientInformationMixed;
  saved?: OAuthTokens;
  readonly stateValue: string;
};

/**
 * An in-memory OAuthClientProvider: what an MCP host keeps per server. `redirectUrl` is the
 * host's loopback callback (never visited when the pages are driven over HTTP).
 */
export function createSdkOAuthProvider(
  options: { redirectUrl?: string; clientName?: string; grantTypes?: string[]; authMethod?: string } = {},
): SdkOAuthProvider {
  let verifier = "";
  const redirect = options.redirectUrl ?? "http://127.0.0.1:9/callback";
  const state = randomBytes(8).toString("hex");
  const provider = {
    authorizationUrl: undefined as URL | undefined,
    client: undefined as OAuthClientInformationMixed | undefined,
    saved: undefined as OAuthTokens | undefined,
    stateValue: state,
    get redirectUrl() {
      return redirect;
    },
    get clientMetadata(): OAuthClientMetadata {
      return {
        client_name: options.clientName ?? "MCP SDK test host",
        redirect_uris: [redirect],
        grant_types: options.grantTypes ?? ["authorization_code", "refresh_token"],
        response_types: ["code"],
        token_endpoint_auth_method: options.authMethod ?? "client_secret_post",
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
 * The host's first connect without a token: the SDK meets our 401 challenge, discovers the
 * protected-resource and authorization-server metadata, registers and hands the user's
 * authorization URL to the provider. Returns that transport (to `finishAuth` on) and the URL.
 */
export async function beginSdkAuthorization(
  endpoint: URL,
  provider: SdkOAuthProvider,
): Promise<{ transport: StreamableHTTPClientTransport; authorizationUrl: URL }> {
  const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
  let refused: unknown;
  await new Client({ name: "host", version: "1" }).connect(transport).catch((err: unknown) => (refused = err));
  if (!(refused instanceof UnauthorizedError)) throw new Error(`expected the SDK's UnauthorizedError, got ${String(refused)}`);
  if (!provider.authorizationUrl) throw new Error("the SDK did not send the user to authorize");
  return { transport, authorizationUrl: provider.authorizationUrl };
}

/** A connected SDK client using the provider's saved tokens. */
export async function connectSdkClient(endpoint: URL, provider: SdkOAuthProvider): Promise<Client> {
  const client = new Client({ name: "host", version: "1" });
  await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: provider }));
  return client;
}
