import type http from "node:http";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize as consent, codeExchangeForm, createJar, createUser, pkce, postForm, registerClient, signIn } from "../../support/agent-oauth.js";
import { DOCUMENT_REDIRECT, startDocumentServer, type DocumentServer } from "../../support/client-metadata-server.js";
import { MAX_FETCHES_PER_CALLER } from "../../../core/grants/client-id-metadata.js";

const ATTACKER = "https://attacker.example/callback";
const REDIRECT = "http://127.0.0.1:9/callback";

/**
 * /oauth2/authorize sends an error back to the redirect URI only once core has verified
 * the client and that the URI is registered for it. When core could not check them
 * (overloaded, unavailable), the answer is a page, never a redirect to an unverified URI.
 */
describe("authorize: errors go back to the redirect URI only after core verified it", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let docs: DocumentServer;
  const held: http.ServerResponse[] = [];

  before(async () => {
    docs = await startDocumentServer();
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, clientMetadataAllowPrivate: true });
  });
  after(async () => {
    for (const res of held) res.destroy();
    await stack?.close();
    await docs?.close();
  });

  const query = (clientId: string, redirectUri: string, extra: Record<string, string> = {}) =>
    new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: redirectUri,
      code_challenge: pkce().challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      state: "st",
      ...extra,
    });
  const authorize = (q: URLSearchParams, headers: Record<string, string> = {}) => fetch(`${stack.url}/oauth2/authorize?${q}`, { redirect: "manual", headers });

  it("hostile: every metadata fetch slot of an address busy with a host that never answers: a 503 page, not a redirect to the request's redirect_uri", async () => {
    // Document clients whose host holds the request open: every fetch slot of this address is taken.
    const hanging = Array.from({ length: MAX_FETCHES_PER_CALLER }, (_, i) => docs.route(docs.path(`hang-${i}`), (_req, res) => void held.push(res)));
    const waiting = hanging.map((clientId) => authorize(query(clientId, ATTACKER)));
    while (held.length < hanging.length) await new Promise((r) => setTimeout(r, 10));

    // One more client cannot be fetched now, so its redirect_uri cannot be checked.
    const unchecked = docs.document({}, {}, "unchecked");
    try {
      const res = await authorize(query(unchecked, ATTACKER));
      expect(res.status).to.equal(503);
      expect(res.headers.get("location")).to.equal(null);
      expect(res.headers.get("retry-after")).to.equal("1");
      expect(res.headers.get("content-type")).to.match(/^text\/html/);
      expect(await res.text()).to.include("Temporarily unavailable");
      // Even the document's own registered redirect URI is not used before it was verified.
      const own = await authorize(query(unchecked, DOCUMENT_REDIRECT));
      expect([own.status, own.headers.get("location")]).to.deep.equal([503, null]);
    } finally {
      // The hanging hosts end.
      for (const r of held.splice(0)) r.destroy();
    }
    // Their clients could not be verified either: pages, no redirects.
    for (const page of await Promise.all(waiting)) {
      expect(page.headers.get("location")).to.equal(null);
      expect(page.status).to.equal(400);
    }
    // With a slot free, the same client is verified and its refusals go back to it.
    const verified = await authorize(query(unchecked, DOCUMENT_REDIRECT, { scope: "no:such:scope" }));
    expect(verified.status).to.equal(303);
    const back = new URL(verified.headers.get("location")!);
    expect(back.origin + back.pathname).to.equal(DOCUMENT_REDIRECT);
    expect(back.searchParams.get("error")).to.equal("invalid_scope");
  });

  it("a verified client's bad scope, PKCE or resource still goes back to its redirect_uri with error, state and iss (RFC 6749 4.1.2.1)", async () => {
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT], scope: "accounts:read" })).body;
    const cases: [Record<string, string>, string][] = [
      [{ scope: "payments:initiate" }, "invalid_scope"],
      [{ code_challenge_method: "plain" }, "invalid_request"],
      [{ resource: "urn:vaultgate:vault:not-a-uuid" }, "invalid_target"],
    ];
    for (const [extra, error] of cases) {
      const res = await authorize(query(client.client_id, REDIRECT, extra));
      expect(res.status, error).to.equal(303);
      const back = new URL(res.headers.get("location")!);
      expect(back.origin + back.pathname).to.equal(REDIRECT);
      expect(back.searchParams.get("error")).to.equal(error);
      expect(back.searchParams.get("state")).to.equal("st");
      expect(back.searchParams.get("iss")).to.equal(stack.issuer);
    }
    // A malformed scope is told as malformed, a missing one as missing.
    for (const [scope, description] of [
      ["accounts:read  payments:simulate", /single spaces/],
      ["", /required/],
    ] as const) {
      const back = new URL((await authorize(query(client.client_id, REDIRECT, { scope }))).headers.get("location")!);
      expect(back.searchParams.get("error")).to.equal("invalid_scope");
      expect(back.searchParams.get("error_description")).to.match(description);
    }
    // Signed in, a vault that is not the user's goes back too (checked after the pair).
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const other = await createUser(stack);
    const res = await jar.get(`/oauth2/authorize?${query(client.client_id, REDIRECT, { resource: `urn:vaultgate:vault:${other.vaultId}` })}`);
    expect(res.status).to.equal(303);
    expect(new URL(res.headers.get("location")!).searchParams.get("error")).to.equal("invalid_target");
  });

  it("an unknown client or an unregistered redirect_uri is a page, never a redirect", async () => {
    const client = (await registerClient(stack, { redirect_uris: [REDIRECT] })).body;
    for (const q of [query("agc_nosuchclient", ATTACKER, { scope: "bad" }), query(client.client_id, ATTACKER, { scope: "bad" })]) {
      const res = await authorize(q);
      expect(res.status).to.equal(400);
      expect(res.headers.get("location")).to.equal(null);
    }
  });

  it("keeps the query of a registered redirect URI as it was written, adding its own parameters after it (RFC 6749 3.1.2)", async () => {
    // A query a form encoder would rewrite: '/' and '~' left raw, a name without '='.
    const registered = "http://127.0.0.1:9/callback?next=/a~b&flag";
    const client = (await registerClient(stack, { redirect_uris: [registered], scope: "accounts:read" })).body;
    const refused = await authorize(query(client.client_id, registered, { scope: "payments:initiate" }));
    expect(refused.status).to.equal(303);
    const location = refused.headers.get("location")!;
    expect(location.startsWith(`${registered}&error=invalid_scope&`), location).to.equal(true);
    expect(new URL(location).searchParams.get("state")).to.equal("st");

    const user = await createUser(stack);
    const { verifier, challenge } = pkce();
    const q = { response_type: "code", client_id: client.client_id, redirect_uri: registered, code_challenge: challenge, code_challenge_method: "S256" };
    const back = await consent(stack, createJar(stack.url), user.email, { ...q, scope: "accounts:read", state: "st" });
    expect(back.href.startsWith(`${registered}&code=`), back.href).to.equal(true);
    expect([back.searchParams.get("state"), back.searchParams.get("iss")]).to.deep.equal(["st", stack.issuer]);
    const token = await postForm(
      `${stack.url}/oauth2/token`,
      codeExchangeForm({ client, code: back.searchParams.get("code")!, verifier }, { redirect_uri: registered }),
    );
    expect(token.status).to.equal(200);
  });
});
