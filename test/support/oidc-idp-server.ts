// A company's identity provider for tests (node-oidc-provider in its own process); prints its
// issuer when listening. Env: IDP_CLIENT_ID, IDP_CLIENT_SECRET, IDP_REDIRECT_URIS, IDP_PORT,
// IDP_PATH; test controls under /__test.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createPrivateKey, generateKeyPairSync } from "node:crypto";
import { exportJWK, SignJWT, decodeProtectedHeader, type JWK } from "jose";
import Provider from "oidc-provider";

// node-oidc-provider ships no types; its callbacks take its koa context.
// biome-ignore lint/suspicious/noExplicitAny: untyped package
type Loose = any;
type Tamper = "none" | "issuer" | "audience" | "nonce" | "signature" | "expired" | "stale-auth-time" | "future-iat" | "foreign-azp";
interface Account {
  sub: string;
  email: string;
  email_verified: boolean;
}

const accounts = new Map<string, Account>();
let tamper: Tamper = "none";
let down = false;
/** What the next sign-ins report: acr and amr (a real provider derives them from how the person logged in). */
let login = { acr: "urn:idp:pwd", amr: ["pwd"] };

// Generated as PEM and imported: on Node 20 exporting a freshly generated key object can hang (lib/crypto.ts).
const rsaKey = () =>
  createPrivateKey(
    generateKeyPairSync("rsa", {
      modulusLength: 2048,
      publicKeyEncoding: { type: "spki", format: "pem" },
      privateKeyEncoding: { type: "pkcs8", format: "pem" },
    }).privateKey,
  );
const privateKey = rsaKey();
const jwk = { ...(await exportJWK(privateKey)), kid: "idp-key-1", alg: "RS256", use: "sig" } as JWK;
const other = rsaKey();

const server = createServer();
await new Promise<void>((resolve) => server.listen(Number(process.env.IDP_PORT ?? 0), "127.0.0.1", resolve));
// IDP_PATH ("/tenant/v2.0/", say) puts the issuer, and every route of the provider, under that path.
const mount = (process.env.IDP_PATH ?? "").replace(/\/+$/, "");
const issuer = `http://127.0.0.1:${(server.address() as { port: number }).port}${process.env.IDP_PATH ?? ""}`;
// Mounted as node-oidc-provider expects: the path taken off the URL, the original kept.
server.on("request", (req: IncomingMessage & { originalUrl?: string }) => {
  if (!mount || !req.url?.startsWith(`${mount}/`)) return;
  req.originalUrl = req.url;
  req.url = req.url.slice(mount.length);
});

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: process.env.IDP_CLIENT_ID ?? "vaultgate",
      client_secret: process.env.IDP_CLIENT_SECRET ?? "vaultgate-secret",
      redirect_uris: (process.env.IDP_REDIRECT_URIS ?? "").split(",").filter(Boolean),
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
      require_auth_time: true,
    },
  ],
  jwks: { keys: [jwk as never] },
  acrValues: ["urn:idp:pwd", "urn:idp:mfa", "mfa"],
  claims: { openid: ["sub", "amr"], email: ["email", "email_verified"] },
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: false } },
  pkce: { required: () => true },
  cookies: { keys: ["test-idp-cookie-key"] },
  interactions: { url: (_ctx: Loose, interaction: Loose) => `${mount}/interaction/${interaction.uid}` },
  async findAccount(_ctx: Loose, sub: string) {
    const a = accounts.get(sub);
    if (!a) return undefined;
    return { accountId: sub, claims: async () => ({ sub, email: a.email, email_verified: a.email_verified }) };
  },
  // The company's own application: no consent screen.
  async loadExistingGrant(ctx: Loose) {
    const o = ctx.oidc;
    const id = o.result?.consent?.grantId || o.session!.grantIdFor(o.client!.clientId);
    if (id) {
      const found = await o.provider.Grant.find(id);
      if (found) return found;
    }
    const grant = new o.provider.Grant({ clientId: o.client!.clientId, accountId: o.session!.accountId! });
    grant.addOIDCScope("openid email");
    await grant.save();
    return grant;
  },
});

// Tampered ID tokens, re-signed (or signed with a key the provider never published).
provider.use(async (ctx: Loose, next: () => Promise<void>) => {
  await next();
  const body = ctx.body as { id_token?: string } | undefined;
  if (ctx.path !== "/token" || tamper === "none" || !body?.id_token) return;
  const payload = JSON.parse(Buffer.from(body.id_token.split(".")[1]!, "base64url").toString()) as Record<string, unknown>;
  const now = Math.floor(Date.now() / 1000);
  if (tamper === "issuer") payload.iss = "https://evil.example";
  if (tamper === "audience") payload.aud = "someone-else";
  if (tamper === "nonce") payload.nonce = "not-the-nonce";
  if (tamper === "expired") Object.assign(payload, { iat: now - 7200, exp: now - 3600 });
  if (tamper === "future-iat") Object.assign(payload, { iat: now + 600, exp: now + 3600 });
  if (tamper === "foreign-azp") payload.azp = "someone-else";
  // A provider that ignored max_age=0 and reported the sign-in of an hour ago.
  if (tamper === "stale-auth-time") payload.auth_time = now - 3600;
  const header = decodeProtectedHeader(body.id_token);
  body.id_token = await new SignJWT(payload).setProtectedHeader({ alg: "RS256", kid: header.kid }).sign(tamper === "signature" ? other : privateKey);
});

const callback = provider.callback();

/** How long the provider spent on each request since last asked (POST /__test/timings takes them): the sign-in bench's provider time. */
let timings: { path: string; ms: number }[] = [];
server.on("request", (req: IncomingMessage, res: ServerResponse) => {
  const started = performance.now();
  const path = new URL(req.url ?? "/", issuer).pathname;
  if (!path.startsWith("/__test/")) res.once("finish", () => timings.push({ path, ms: performance.now() - started }));
});

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let s = "";
    req.on("data", (c: Buffer) => (s += c.toString()));
    req.on("end", () => resolve(s));
  });
}

function send(res: ServerResponse, status: number, type: string, body: string) {
  res.writeHead(status, { "content-type": type }).end(body);
}

server.on("request", async (req: IncomingMessage, res: ServerResponse) => {
  try {
    const url = new URL(req.url ?? "/", issuer);
    if (url.pathname.startsWith("/__test/") && req.method === "POST") {
      const body = JSON.parse((await readBody(req)) || "{}") as Record<string, unknown>;
      if (url.pathname === "/__test/account") accounts.set(String(body.sub), body as unknown as Account);
      if (url.pathname === "/__test/tamper") tamper = body.mode as Tamper;
      if (url.pathname === "/__test/down") down = Boolean(body.down);
      if (url.pathname === "/__test/login") login = body as typeof login;
      if (url.pathname === "/__test/timings") {
        const taken = timings;
        timings = [];
        return send(res, 200, "application/json", JSON.stringify(taken));
      }
      return send(res, 200, "application/json", "{}");
    }
    if (down) return send(res, 503, "text/plain", "down for maintenance");
    const m = /^\/interaction\/([\w-]+)$/.exec(url.pathname);
    if (m && req.method === "GET") {
      const details = await provider.interactionDetails(req, res);
      const options = [...accounts.values()].map((a) => `<option value="${a.sub}">${a.email}</option>`).join("");
      return send(
        res,
        200,
        "text/html",
        `<!doctype html><title>Example Corp sign-in</title><h1>Example Corp</h1><p>${details.prompt.name}</p>
         <form method="post" action="${mount}/interaction/${m[1]}"><label>Account <select id="account" name="account">${options}</select></label>
         <label>Password <input id="password" name="password" type="password"></label><button type="submit">Sign in</button></form>`,
      );
    }
    if (m && req.method === "POST") {
      const form = new URLSearchParams(await readBody(req));
      const sub = form.get("account") ?? "";
      if (!accounts.has(sub)) return send(res, 400, "text/plain", "unknown account");
      return await provider.interactionFinished(req, res, { login: { accountId: sub, acr: login.acr, amr: login.amr } }, { mergeWithLastSubmission: false });
    }
    return callback(req, res);
  } catch (err) {
    send(res, 500, "text/plain", (err as Error).message);
  }
});

process.stdout.write(`${JSON.stringify({ issuer })}\n`);
