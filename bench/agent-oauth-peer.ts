/**
 * Child process of agent-oauth.bench.ts: node-oidc-provider with the same client, grants
 * and token formats as ours (PKCE S256, client_secret_post, ES256 JWT access tokens,
 * refresh rotation), in a process of its own so that neither server's heap, garbage
 * collector or JIT state is the other's:
 *   node bench/agent-oauth-peer.js <code-challenge>
 * Prints one JSON line ({ tokenUrl, clientId, clientSecret }), then mints authorization
 * codes when the bench asks (`codes`, n) until SIGTERM.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { serveBenchCalls } from "./support.js";

const REDIRECT = "http://127.0.0.1:9/cb";
const SCOPE = "accounts:read";
const challenge = process.argv[2];
if (!challenge) {
  console.error("usage: agent-oauth-peer <code-challenge>");
  process.exit(2);
}

/**
 * oidc-provider's stock memory adapter is an LRU of 1000 entries, which evicts codes and
 * grants mid-run; this unbounded Map keeps the same semantics (upsert, find, consume,
 * destroy, revokeByGrantId) so the peer is measured without spurious failures.
 */
class MapAdapter {
  static readonly store = new Map<string, Record<string, unknown>>();
  static readonly byGrant = new Map<string, Set<string>>();
  constructor(private readonly name: string) {}
  private key(id: string) {
    return `${this.name}:${id}`;
  }
  async upsert(id: string, payload: Record<string, unknown>) {
    const key = this.key(id);
    MapAdapter.store.set(key, payload);
    if (typeof payload.grantId === "string") {
      const set = MapAdapter.byGrant.get(payload.grantId) ?? new Set<string>();
      set.add(key);
      MapAdapter.byGrant.set(payload.grantId, set);
    }
  }
  async find(id: string) {
    return MapAdapter.store.get(this.key(id));
  }
  async findByUid(uid: string) {
    for (const [key, value] of MapAdapter.store) if (key.startsWith(`${this.name}:`) && value.uid === uid) return value;
    return undefined;
  }
  async findByUserCode() {
    return undefined;
  }
  async consume(id: string) {
    const p = MapAdapter.store.get(this.key(id));
    if (p) p.consumed = Math.floor(Date.now() / 1000);
  }
  async destroy(id: string) {
    MapAdapter.store.delete(this.key(id));
  }
  async revokeByGrantId(grantId: string) {
    for (const key of MapAdapter.byGrant.get(grantId) ?? []) MapAdapter.store.delete(key);
    MapAdapter.byGrant.delete(grantId);
  }
}

const { default: Provider } = await import("oidc-provider");
const server = createServer();
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
const resource = `${issuer}/mcp`;
const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
const jwk = { ...privateKey.export({ format: "jwk" }), kid: "bench", alg: "ES256", use: "sig" };
const clientId = "bench-client";
const clientSecret = randomBytes(32).toString("base64url");
const provider = new Provider(issuer, {
  clients: [{ client_id: clientId, client_secret: clientSecret, redirect_uris: [REDIRECT], grant_types: ["authorization_code", "refresh_token"], response_types: ["code"], token_endpoint_auth_method: "client_secret_post", scope: SCOPE, id_token_signed_response_alg: "ES256" }],
  jwks: { keys: [jwk as never] },
  scopes: [SCOPE],
  cookies: { keys: [randomBytes(16).toString("hex")] },
  pkce: { required: () => true },
  issueRefreshToken: async () => true,
  rotateRefreshToken: () => true,
  features: {
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => resource,
      useGrantedResource: async () => true,
      getResourceServerInfo: async () => ({ scope: SCOPE, audience: resource, accessTokenTTL: 3600, accessTokenFormat: "jwt", jwt: { sign: { alg: "ES256" } } }),
    },
  },
  findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub }) }),
  adapter: MapAdapter,
} as never);
server.on("request", provider.callback());
const client = await provider.Client.find(clientId);

serveBenchCalls({
  /** Fresh single-use codes bound to REDIRECT and the challenge, as a consent would leave them. */
  async codes(n: number) {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const grant = new provider.Grant({ accountId: "bench-user", clientId });
      grant.addResourceScope(resource, SCOPE);
      const grantId = await grant.save();
      const code = new provider.AuthorizationCode({
        accountId: "bench-user",
        client,
        grantId,
        redirectUri: REDIRECT,
        scope: SCOPE,
        resource,
        codeChallenge: challenge,
        codeChallengeMethod: "S256",
      } as never);
      out.push(await code.save());
    }
    return out;
  },
});
console.log(JSON.stringify({ tokenUrl: `${issuer}/token`, clientId, clientSecret }));
