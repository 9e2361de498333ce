import { expect } from "chai";
import { decodeJwt } from "jose";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient, signIn } from "../../support/agent-oauth.js";
import { postRpc } from "../../support/mcp.js";
import { DOCUMENT_REDIRECT, startDocumentServer, validDocument, type DocumentServer } from "../../support/client-metadata-server.js";
import { thrownBy } from "../../support/refusals.js";

const urn = (vaultId: string) => `urn:vaultgate:vault:${vaultId}`;

/** OAuth Client ID Metadata Documents end to end: authorize, consent, token, MCP, refresh, revoke. */
describe("client ID metadata documents over HTTP", function () {
  this.timeout(30_000);
  let stack: TestStack;
  let docs: DocumentServer;
  before(async () => {
    docs = await startDocumentServer();
    // The document server is on 127.0.0.1: only the development setting lets core fetch it.
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, clientMetadataAllowPrivate: true });
  });
  after(async () => {
    await stack.close();
    await docs.close();
  });

  /** Sign-in, consent and the redirect back with a code, for `clientId`. */
  async function codeFor(clientId: string, opts: { user?: Awaited<ReturnType<typeof createUser>>; scope?: string } = {}) {
    const user = opts.user ?? (await createUser(stack));
    const jar = createJar(stack.url);
    const { verifier, challenge } = pkce();
    const back = await authorize(stack, jar, user.email, {
      response_type: "code",
      client_id: clientId,
      redirect_uri: DOCUMENT_REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: opts.scope ?? "accounts:read",
      resource: [urn(user.vaultId)],
      state: "st",
    });
    expect(back.searchParams.get("error"), back.toString()).to.equal(null);
    return { user, jar, code: back.searchParams.get("code")!, verifier };
  }

  const exchange = (f: Record<string, string>) =>
    postForm(`${stack.url}/oauth2/token`, { grant_type: "authorization_code", redirect_uri: DOCUMENT_REDIRECT, ...f });

  it("advertises client_id_metadata_document_supported and the none auth method", async () => {
    const m = (await (await fetch(`${stack.url}/.well-known/oauth-authorization-server`)).json()) as Record<string, unknown>;
    expect(m.client_id_metadata_document_supported).to.equal(true);
    expect(m.token_endpoint_auth_methods_supported).to.include("none");
    expect(m.revocation_endpoint_auth_methods_supported).to.include("none");
  });

  it("runs the whole code flow with a URL client_id and no secret; the token works on /mcp/read; one fetch", async () => {
    const clientId = docs.document({}, {}, "flow");
    const { user, code, verifier } = await codeFor(clientId);
    const token = await exchange({ code, code_verifier: verifier, client_id: clientId });
    expect(token.status, JSON.stringify(token.body)).to.equal(200);
    expect(token.headers.get("cache-control")).to.equal("no-store");
    const claims = decodeJwt(token.body.access_token as string);
    expect(claims.client_id).to.equal(clientId);
    expect(claims.aud).to.include(urn(user.vaultId));

    const read = await postRpc(
      `${stack.url}/mcp/read`,
      { jsonrpc: "2.0", id: 1, method: "accounts.balance" },
      { authorization: `Bearer ${token.body.access_token}` },
    );
    expect(read.status).to.equal(200);
    expect(read.json!.result.vault_id).to.equal(user.vaultId);

    // Refresh, as a public client: client_id only.
    const refreshed = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: token.body.refresh_token as string,
      client_id: clientId,
    });
    expect(refreshed.status, JSON.stringify(refreshed.body)).to.equal(200);
    expect(refreshed.body.jti).to.not.equal(token.body.jti);

    // Revocation (RFC 7009 2.1 lets a public client identify itself with client_id alone).
    const revoked = await postForm(`${stack.url}/oauth2/revoke`, { token: refreshed.body.refresh_token as string, client_id: clientId });
    expect(revoked.status).to.equal(200);
    const after = await postRpc(
      `${stack.url}/mcp/read`,
      { jsonrpc: "2.0", id: 2, method: "accounts.balance" },
      { authorization: `Bearer ${refreshed.body.access_token}` },
    );
    expect(after.status).to.equal(401);

    // authorize (twice, around sign-in), consent, exchange, refresh, revoke: one fetch.
    expect(docs.hits(clientId)).to.equal(1);

    // The consent wrote a row for the client: no secret, marked as a document client.
    const { rows } = await stack.core.db.raw(
      `SELECT secret_hash, metadata_document, client_name, token_endpoint_auth_method FROM oauth_clients WHERE client_id = ?`,
      [clientId],
    );
    expect(rows).to.deep.equal([{ secret_hash: null, metadata_document: true, client_name: "Document agent", token_endpoint_auth_method: "none" }]);
  });

  it("shows the document's name and URL on the consent page and lists the agent on the dashboard", async () => {
    const clientId = docs.document({ client_name: "Shiny MCP client" });
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const { challenge } = pkce();
    const q = new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: DOCUMENT_REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
    });
    await signIn(stack, jar, user.email);
    const page = await jar.get(`/oauth2/authorize?${q}`);
    expect(page.status).to.equal(200);
    const text = await page.text();
    expect(text).to.include("Shiny MCP client").and.to.include(clientId);

    await codeFor(clientId, { user });
    const dashboard = await (await jar.get("/dashboard/agents")).text();
    expect(dashboard).to.include("Shiny MCP client");
  });

  it("caches the document for its max-age, then fetches again and brings the client's row up to date", async () => {
    const path = docs.path("cached");
    const clientId = docs.origin + path;
    docs.serve(path, validDocument(clientId, { client_name: "Before" }), { "cache-control": "max-age=120" });
    await codeFor(clientId);
    await codeFor(clientId);
    expect(docs.hits(path)).to.equal(1);
    docs.serve(path, validDocument(clientId, { client_name: "After" }), { "cache-control": "max-age=120" });
    stack.clock.advance(121_000);
    await codeFor(clientId);
    expect(docs.hits(path)).to.equal(2);
    const { rows } = await stack.core.db.raw(`SELECT client_name FROM oauth_clients WHERE client_id = ?`, [clientId]);
    expect(rows).to.deep.equal([{ client_name: "After" }]);
  });

  it("keeps public and confidential clients apart at the token endpoint (hostile caller)", async () => {
    const clientId = docs.document();
    const registered = (await registerClient(stack, { redirect_uris: [DOCUMENT_REDIRECT] })).body;

    // A URL client may not send a secret.
    const u = await codeFor(clientId);
    const withSecret = await exchange({ code: u.code, code_verifier: u.verifier, client_id: clientId, client_secret: "anything" });
    expect(withSecret.status).to.equal(401);
    expect(withSecret.body.error).to.equal("invalid_client");
    expect(withSecret.body.error_description).to.match(/public client/);
    // A registered client's credentials cannot redeem the URL client's code.
    const asRegistered = await exchange({ code: u.code, code_verifier: u.verifier, client_id: registered.client_id, client_secret: registered.client_secret });
    expect(asRegistered.status).to.equal(400);
    expect(asRegistered.body.error).to.equal("invalid_grant");

    // A registered client without its secret is not a public client.
    const r = await codeFor(registered.client_id);
    const noSecret = await exchange({ code: r.code, code_verifier: r.verifier, client_id: registered.client_id });
    expect(noSecret.status).to.equal(401);
    expect(noSecret.body.error).to.equal("invalid_client");
    const emptySecret = await exchange({ code: r.code, code_verifier: r.verifier, client_id: registered.client_id, client_secret: "" });
    expect(emptySecret.status).to.equal(401);
    // The URL client cannot redeem the registered client's code.
    const asUrl = await exchange({ code: r.code, code_verifier: r.verifier, client_id: clientId });
    expect(asUrl.status).to.equal(400);
    expect(asUrl.body.error).to.equal("invalid_grant");

    // None of that consumed either code.
    const uToken = await exchange({ code: u.code, code_verifier: u.verifier, client_id: clientId });
    expect(uToken.status).to.equal(200);
    const rToken = await exchange({ code: r.code, code_verifier: r.verifier, client_id: registered.client_id, client_secret: registered.client_secret });
    expect(rToken.status).to.equal(200);

    // Refresh tokens stay with their client.
    const crossRefresh = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: rToken.body.refresh_token as string,
      client_id: clientId,
    });
    expect(crossRefresh.body.error).to.equal("invalid_grant");
    const crossRefresh2 = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: uToken.body.refresh_token as string,
      client_id: registered.client_id,
      client_secret: registered.client_secret,
    });
    expect(crossRefresh2.body.error).to.equal("invalid_grant");
    const noSecretRefresh = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: rToken.body.refresh_token as string,
      client_id: registered.client_id,
    });
    expect(noSecretRefresh.status).to.equal(401);
    // Revoking another client's token is refused.
    const crossRevoke = await postForm(`${stack.url}/oauth2/revoke`, { token: rToken.body.refresh_token as string, client_id: clientId });
    expect(crossRevoke.body.error).to.equal("invalid_request");

    // A wrong PKCE verifier: the public client has nothing else, so nothing is issued.
    const u2 = await codeFor(clientId);
    const wrongVerifier = await exchange({ code: u2.code, code_verifier: pkce().verifier, client_id: clientId });
    expect(wrongVerifier.body.error).to.equal("invalid_grant");
  });

  it("refuses bad documents with a page at authorize and invalid_client at the token endpoint, never a 5xx", async () => {
    const variants: [string, (url: string, path: string) => void, RegExp][] = [
      ["wrong client_id", (url, path) => docs.serve(path, validDocument(`${url}?other`)), /client_id must equal the URL/],
      ["oversized", (url, path) => docs.serve(path, validDocument(url, { padding: "x".repeat(8000) })), /larger than 5120 bytes/],
      [
        "redirecting",
        (_url, path) =>
          docs.route(path, (_req, res) => {
            res.writeHead(301, { location: docs.document() });
            res.end();
          }),
        /redirects are not followed/,
      ],
      ["not JSON", (_url, path) => docs.serve(path, "client_id=nope", { "content-type": "text/plain" }), /is not JSON/],
      ["bad redirect_uris", (url, path) => docs.serve(path, validDocument(url, { redirect_uris: ["http://agent.example/cb"] })), /http only on loopback/],
      ["empty scope", (url, path) => docs.serve(path, validDocument(url, { scope: "" })), /scope names no scope/],
      ["blank scope", (url, path) => docs.serve(path, validDocument(url, { scope: " \t " })), /scope names no scope/],
      [
        "bidi client_name",
        (url, path) => docs.serve(path, validDocument(url, { client_name: "Trusted \u202eliveE" })),
        /client_name must not contain line or paragraph separators or bidirectional controls/,
      ],
      [
        "private_key_jwt",
        (url, path) => docs.serve(path, validDocument(url, { token_endpoint_auth_method: "private_key_jwt" })),
        /private_key_jwt is not supported/,
      ],
    ];
    const { challenge } = pkce();
    for (const [name, setup, why] of variants) {
      const path = docs.path(name.replace(/\W/g, "-"));
      const clientId = docs.origin + path;
      setup(clientId, path);
      const q = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: DOCUMENT_REDIRECT,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
      });
      const page = await fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual" });
      expect(page.status, name).to.equal(400);
      const html = (await page.text()).replace(/&quot;/g, '"').replace(/&#39;/g, "'");
      expect(html, name).to.include("Unknown application");
      expect(html, name).to.match(why);
      const token = await exchange({ code: "vgc_x", code_verifier: pkce().verifier, client_id: clientId });
      expect(token.status, name).to.equal(401);
      expect(token.body.error, name).to.equal("invalid_client");
      expect(token.body.error_description, name).to.match(why);
    }
    // A slow document server: the 3 s limit, then the same refusal.
    const slow = docs.path("slow");
    docs.route(slow, () => undefined);
    const token = await exchange({ code: "vgc_x", code_verifier: pkce().verifier, client_id: docs.origin + slow });
    expect(token.status).to.equal(401);
    expect(token.body.error_description).to.equal("client_id metadata document: no answer within 3 s");
    // Malformed client_id URLs are refused without a fetch.
    const before = docs.totalHits();
    for (const bad of [
      `${docs.origin}/`,
      `${docs.origin}/a/../b.json`,
      `${docs.origin}/a.json#x`,
      `http://user@127.0.0.1:${new URL(docs.origin).port}/a.json`,
    ]) {
      const res = await exchange({ code: "vgc_x", code_verifier: pkce().verifier, client_id: bad });
      expect(res.status, bad).to.equal(401);
      expect(res.body.error_description, bad).to.match(/^client_id URL /);
    }
    expect(docs.totalHits()).to.equal(before);
  });

  it("concurrent first consents for a new document client write one row and one fetch", async () => {
    const clientId = docs.document();
    const results = await Promise.all([codeFor(clientId), codeFor(clientId), codeFor(clientId)]);
    const tokens = await Promise.all(results.map((r) => exchange({ code: r.code, code_verifier: r.verifier, client_id: clientId })));
    expect(tokens.map((t) => t.status)).to.deep.equal([200, 200, 200]);
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM oauth_clients WHERE client_id = ?`, [clientId]);
    expect(rows[0].n).to.equal(1);
    const agents = await stack.core.db.raw(`SELECT count(*)::int AS n FROM oauth_agents WHERE client_id = ?`, [clientId]);
    expect(agents.rows[0].n).to.equal(3);
    expect(docs.hits(clientId)).to.equal(1);
  });

  it("concurrent exchanges of one public client's code issue exactly one token", async () => {
    const clientId = docs.document();
    const { code, verifier } = await codeFor(clientId);
    const results = await Promise.all(Array.from({ length: 6 }, () => exchange({ code, code_verifier: verifier, client_id: clientId })));
    expect(results.filter((r) => r.status === 200)).to.have.length(1);
    expect(results.filter((r) => r.status === 400).map((r) => r.body.error)).to.deep.equal(Array(5).fill("invalid_grant"));
  });

  it("the database keeps registered and document clients apart", async () => {
    const err = await thrownBy(
      stack.core.db.raw(
        `INSERT INTO oauth_clients (client_id, secret_hash, client_name, redirect_uris, grant_types, response_types, token_endpoint_auth_method, scopes, created_at)
         VALUES ('agc_nosecret', NULL, 'x', '{}', '{}', '{}', 'client_secret_basic', '{}', now())`,
      ),
    );
    expect((err as { code?: string }).code).to.equal("23514");
  });
});

describe("client ID metadata documents without the development setting", function () {
  this.timeout(20_000);
  let stack: TestStack;
  let docs: DocumentServer;
  before(async () => {
    docs = await startDocumentServer();
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(async () => {
    await stack.close();
    await docs.close();
  });

  it("refuses documents on loopback and private addresses before connecting, and http client_ids", async () => {
    const port = new URL(docs.origin).port;
    const path = docs.path("private");
    docs.serve(path, validDocument(`https://127.0.0.1:${port}${path}`));
    const { challenge } = pkce();
    const cases: [string, RegExp][] = [
      [`https://127.0.0.1:${port}${path}`, /non-public address/],
      [`https://localhost:${port}${path}`, /non-public address/],
      [`https://[::1]:${port}${path}`, /non-public address/],
      ["https://169.254.169.254/latest/meta-data.json", /non-public address/],
      ["https://10.0.0.7/client.json", /non-public address/],
      [`http://127.0.0.1:${port}${path}`, /must use https/],
    ];
    for (const [clientId, why] of cases) {
      const q = new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: DOCUMENT_REDIRECT,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
      });
      const page = await fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual" });
      expect(page.status, clientId).to.equal(400);
      expect(await page.text(), clientId).to.match(why);
      const token = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "authorization_code",
        code: "vgc_x",
        redirect_uri: DOCUMENT_REDIRECT,
        code_verifier: pkce().verifier,
        client_id: clientId,
      });
      expect(token.status, clientId).to.equal(401);
      expect(token.body.error).to.equal("invalid_client");
      expect(token.body.error_description, clientId).to.match(why);
    }
    expect(docs.totalHits()).to.equal(0);
  });
});
