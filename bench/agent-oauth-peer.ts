/**
 * Child process of agent-oauth.bench.ts: node-oidc-provider with our client, grants and token
 * formats, in its own process so neither server's heap or JIT is the other's.
 * Usage: `node bench/agent-oauth-peer.js <code-challenge> [<postgres-url>]`.
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import pg from "pg";
import { serveBenchCalls } from "./support.js";

const REDIRECT = "http://127.0.0.1:9/cb";
const SCOPE = "accounts:read";
const [challenge, databaseUrl] = process.argv.slice(2);
if (!challenge) {
  console.error("usage: agent-oauth-peer <code-challenge> [<postgres-url>]");
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

/** The same pool size as ours (DATABASE_POOL_MAX's default). */
const pool = databaseUrl ? new pg.Pool({ connectionString: databaseUrl, max: 20 }) : undefined;

/**
 * Every oidc-provider model in one table, as the example adapters in its docs store them:
 * the payload as JSON, with the columns lookups need (grant, uid, user code) beside it.
 * Each call is one committed statement, so a code, grant or token is durable when saved.
 */
class PgAdapter {
  constructor(private readonly name: string) {}
  async upsert(id: string, payload: Record<string, unknown>, expiresIn?: number) {
    await pool!.query(
      `INSERT INTO oidc_models (model, id, payload, grant_id, uid, user_code, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $7::int IS NULL THEN NULL ELSE now() + make_interval(secs => $7::int) END)
       ON CONFLICT (model, id) DO UPDATE SET payload = excluded.payload, grant_id = excluded.grant_id, uid = excluded.uid,
         user_code = excluded.user_code, expires_at = excluded.expires_at`,
      [this.name, id, payload, payload.grantId ?? null, payload.uid ?? null, payload.userCode ?? null, expiresIn ?? null],
    );
  }
  private async one(column: string, value: string) {
    const { rows } = await pool!.query(
      `SELECT payload, consumed_at FROM oidc_models WHERE model = $1 AND ${column} = $2 AND (expires_at IS NULL OR expires_at > now())`,
      [this.name, value],
    );
    const row = rows[0] as { payload: Record<string, unknown>; consumed_at: Date | null } | undefined;
    return row && { ...row.payload, ...(row.consumed_at ? { consumed: true } : {}) };
  }
  find(id: string) {
    return this.one("id", id);
  }
  findByUid(uid: string) {
    return this.one("uid", uid);
  }
  findByUserCode(userCode: string) {
    return this.one("user_code", userCode);
  }
  async consume(id: string) {
    await pool!.query(`UPDATE oidc_models SET consumed_at = now() WHERE model = $1 AND id = $2`, [this.name, id]);
  }
  async destroy(id: string) {
    await pool!.query(`DELETE FROM oidc_models WHERE model = $1 AND id = $2`, [this.name, id]);
  }
  async revokeByGrantId(grantId: string) {
    await pool!.query(`DELETE FROM oidc_models WHERE model = $1 AND grant_id = $2`, [this.name, grantId]);
  }
}

if (pool) {
  await pool.query(`CREATE TABLE IF NOT EXISTS oidc_models (
    model text NOT NULL, id text NOT NULL, payload jsonb NOT NULL, grant_id text, uid text, user_code text,
    expires_at timestamptz, consumed_at timestamptz, PRIMARY KEY (model, id))`);
  await pool.query(`CREATE INDEX IF NOT EXISTS oidc_models_grant ON oidc_models (model, grant_id)`);
  await pool.query(`CREATE INDEX IF NOT EXISTS oidc_models_uid ON oidc_models (model, uid)`);
  await pool.query(`CREATE INDEX IF NOT EXISTS oidc_models_user_code ON oidc_models (model, user_code)`);
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
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [REDIRECT],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_post",
      scope: SCOPE,
      id_token_signed_response_alg: "ES256",
    },
  ],
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
      getResourceServerInfo: async () => ({
        scope: SCOPE,
        audience: resource,
        accessTokenTTL: 3600,
        accessTokenFormat: "jwt",
        jwt: { sign: { alg: "ES256" } },
      }),
    },
  },
  findAccount: async (_ctx: unknown, sub: string) => ({ accountId: sub, claims: async () => ({ sub }) }),
  adapter: pool ? PgAdapter : MapAdapter,
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
