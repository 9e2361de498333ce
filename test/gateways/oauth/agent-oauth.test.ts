import { expect } from "chai";
import { decodeJwt } from "jose";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, formFields, pkce, postForm, registerClient, signIn } from "../../support/agent-oauth.js";
import { codeExchangeForm, consentCode, REDIRECT, oauthGrant, vaultUrn } from "../../support/agent-oauth.js";

describe("agent OAuth over HTTP", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  describe("metadata", () => {
    it("publishes RFC 8414 authorization server metadata", async () => {
      const res = await fetch(`${stack.url}/.well-known/oauth-authorization-server`);
      const m = (await res.json()) as Record<string, unknown>;
      expect(m.issuer).to.equal(stack.url);
      expect(m.authorization_endpoint).to.equal(`${stack.url}/oauth2/authorize`);
      expect(m.token_endpoint).to.equal(`${stack.url}/oauth2/token`);
      expect(m.registration_endpoint).to.equal(`${stack.url}/oauth2/register`);
      expect(m.revocation_endpoint).to.equal(`${stack.url}/oauth2/revoke`);
      expect(m.code_challenge_methods_supported).to.deep.equal(["S256"]);
      expect(m.token_endpoint_auth_methods_supported).to.have.members(["client_secret_post", "client_secret_basic", "none"]);
      expect(m.authorization_response_iss_parameter_supported).to.equal(true);
    });

    it("publishes RFC 9728 protected resource metadata for the MCP endpoints, each listing only its tools' scopes", async () => {
      const scopes: Record<string, string[]> = {
        "": ["accounts:read", "payments:initiate", "payments:simulate", "audit:stream", "agent:budget:create"],
        "/mcp/read": ["accounts:read", "audit:stream"],
        "/mcp/write": ["payments:initiate", "payments:simulate"],
        "/write": ["payments:initiate", "payments:simulate"],
        "/mcp/treasury": ["agent:budget:create"],
      };
      for (const path of Object.keys(scopes)) {
        const res = await fetch(`${stack.url}/.well-known/oauth-protected-resource${path}`);
        expect(res.status).to.equal(200);
        const m = (await res.json()) as Record<string, unknown>;
        expect(m.resource).to.equal(stack.url + path);
        expect(m.authorization_servers).to.deep.equal([stack.url]);
        expect(m.scopes_supported).to.have.members(scopes[path]!);
      }
      expect((await fetch(`${stack.url}/.well-known/oauth-protected-resource/nope`)).status).to.equal(404);
    });
  });

  describe("registration (RFC 7591)", () => {
    it("is rate-limited per remote address before the secret is derived: 429 rate_limited, Retry-After: 60, nothing registered", async () => {
      const limited = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, registrationLimitPerMinute: 2 });
      try {
        // Another address's quota (the limit is per address, shared through the database).
        await limited.core.db.raw(`DELETE FROM rate_limit_logs WHERE key LIKE 'oauth-register:%'`);
        expect((await registerClient(limited)).status).to.equal(201);
        expect((await registerClient(limited)).status).to.equal(201);
        const before = await limited.core.db.raw(`SELECT count(*)::int AS n FROM oauth_clients`);
        const refused = await registerClient(limited);
        expect(refused.status).to.equal(429);
        expect(refused.headers.get("retry-after")).to.equal("60");
        expect(refused.body.error).to.equal("rate_limited");
        const after = await limited.core.db.raw(`SELECT count(*)::int AS n FROM oauth_clients`);
        expect(after.rows[0].n).to.equal(before.rows[0].n);
        limited.clock.advance(61_000);
        expect((await registerClient(limited)).status).to.equal(201);
      } finally {
        await limited.close();
      }
    });

    it("registers a client and returns the registration fields once", async () => {
      const { status, body } = await registerClient(stack);
      expect(status).to.equal(201);
      expect(body.client_id).to.match(/^agc_[0-9a-f]{24}$/);
      expect(body.client_secret).to.match(/^ags_[A-Za-z0-9_-]{43}$/);
      expect(body.client_id_issued_at).to.be.a("number");
      expect(body.redirect_uris).to.deep.equal([REDIRECT]);
      const { rows } = await stack.core.db.raw(`SELECT secret_hash FROM oauth_clients WHERE client_id = ?`, [body.client_id]);
      expect(rows[0].secret_hash).to.match(/^scrypt\$/);
      expect(rows[0].secret_hash).to.not.include(body.client_secret);
    });

    it("answers bad metadata with RFC 7591 errors", async () => {
      const cases: [Record<string, unknown>, string][] = [
        [{ redirect_uris: ["http://evil.example/cb"] }, "invalid_redirect_uri"],
        [{ redirect_uris: [] }, "invalid_redirect_uri"],
        [{ redirect_uris: ["https://ok.example/cb#frag"] }, "invalid_redirect_uri"],
        [{ redirect_uris: "https://ok.example/cb" }, "invalid_redirect_uri"],
        // Not RFC 3986 URIs: the URL parser would redirect somewhere other than what was registered.
        [{ redirect_uris: ["https://ok.example/c\tb"] }, "invalid_redirect_uri"],
        [{ redirect_uris: ["https://ok.example/cb\r\nX-Evil: 1"] }, "invalid_redirect_uri"],
        [{ redirect_uris: [" https://ok.example/cb"] }, "invalid_redirect_uri"],
        [{ redirect_uris: ["https://ok.example/c b"] }, "invalid_redirect_uri"],
        [{ redirect_uris: ["https://evil.example\\@ok.example/cb"] }, "invalid_redirect_uri"],
        [{ grant_types: ["client_credentials"] }, "invalid_client_metadata"],
        [{ response_types: ["token"] }, "invalid_client_metadata"],
        [{ scope: "accounts:read treasury:write" }, "invalid_client_metadata"],
        [{ client_name: "Agent\u0007" }, "invalid_client_metadata"],
        [{ client_name: "Agent\u009b31m" }, "invalid_client_metadata"],
      ];
      for (const [body, error] of cases) {
        const res = await registerClient(stack, body);
        expect(res.status, JSON.stringify(body)).to.equal(400);
        expect(res.body.error, JSON.stringify(body)).to.equal(error);
      }
      const raw = await fetch(`${stack.url}/oauth2/register`, { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" });
      expect(raw.status).to.equal(400);
      expect(((await raw.json()) as { error: string }).error).to.equal("invalid_client_metadata");
    });
  });

  describe("authorize", () => {
    it("shows a page, never a redirect, for an unknown client or unregistered redirect URI", async () => {
      const client = (await registerClient(stack)).body;
      const { challenge } = pkce();
      const base = { response_type: "code", code_challenge: challenge, code_challenge_method: "S256", scope: "accounts:read", state: "s" };
      for (const q of [
        { ...base, client_id: "agc_unknown", redirect_uri: REDIRECT },
        { ...base, client_id: client.client_id, redirect_uri: "http://127.0.0.1:9/other" },
        { ...base, client_id: client.client_id, redirect_uri: `${REDIRECT}/` },
      ]) {
        const res = await fetch(`${stack.url}/oauth2/authorize?${new URLSearchParams(q)}`, { redirect: "manual" });
        expect(res.status).to.equal(400);
        expect(res.headers.get("content-type")).to.match(/^text\/html/);
        const text = await res.text();
        expect(text).to.not.match(/at .*\.ts:\d+/);
      }
    });

    it("takes any port on a registered http loopback URI, as a native app's listener gets one from the OS", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack, { redirect_uris: ["http://127.0.0.1/callback", "https://app.example/cb"] })).body;
      const { verifier, challenge } = pkce();
      const ephemeral = "http://127.0.0.1:49321/callback";
      const q = {
        response_type: "code",
        client_id: client.client_id,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
        state: "s",
      };
      const back = await authorize(stack, createJar(stack.url), user.email, { ...q, redirect_uri: ephemeral });
      expect(back.origin + back.pathname).to.equal(ephemeral);
      const exchange = {
        grant_type: "authorization_code",
        code: back.searchParams.get("code")!,
        code_verifier: verifier,
        client_id: client.client_id,
        client_secret: client.client_secret,
      };
      // The exchange names the URI the code went to, port included.
      const elsewhere = await postForm(`${stack.url}/oauth2/token`, { ...exchange, redirect_uri: "http://127.0.0.1/callback" });
      expect([elsewhere.status, elsewhere.body.error]).to.deep.equal([400, "invalid_grant"]);
      const token = await postForm(`${stack.url}/oauth2/token`, { ...exchange, redirect_uri: ephemeral });
      expect(token.status).to.equal(200);
    });

    it("hostile: only the port of an http loopback URI may differ, and only in the URI's own spelling", async () => {
      const client = (await registerClient(stack, { redirect_uris: ["http://127.0.0.1:9/callback", "https://app.example/cb"] })).body;
      const q = { response_type: "code", client_id: client.client_id, code_challenge: pkce().challenge, code_challenge_method: "S256", scope: "accounts:read" };
      for (const redirect_uri of [
        "http://localhost:5/callback",
        "http://127.0.0.1:5/callback/",
        "http://127.0.0.1:5/callback?next=x",
        "http://127.0.0.1:5/Callback",
        "http://127.0.0.1:05/callback",
        "HTTP://127.0.0.1:5/callback",
        "https://127.0.0.1:5/callback",
        "http://127.0.0.2:5/callback",
        "https://app.example:8443/cb",
      ]) {
        const res = await fetch(`${stack.url}/oauth2/authorize?${new URLSearchParams({ ...q, redirect_uri })}`, { redirect: "manual" });
        expect(res.status, redirect_uri).to.equal(400);
        expect(res.headers.get("location"), redirect_uri).to.equal(null);
      }
    });

    it("redirects protocol errors to the registered URI with state and iss", async () => {
      const client = (await registerClient(stack, { scope: "accounts:read" })).body;
      const { challenge } = pkce();
      const good = {
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: REDIRECT,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
        state: "xyz",
      };
      const cases: [Record<string, string>, string][] = [
        [{ ...good, code_challenge_method: "plain" }, "invalid_request"],
        [{ ...good, code_challenge: "" }, "invalid_request"],
        [{ ...good, scope: "payments:initiate" }, "invalid_scope"],
        [{ ...good, scope: "" }, "invalid_scope"],
        [{ ...good, resource: "https://elsewhere.example/" }, "invalid_target"],
        [{ ...good, response_type: "token" }, "unsupported_response_type"],
      ];
      for (const [q, error] of cases) {
        const res = await fetch(`${stack.url}/oauth2/authorize?${new URLSearchParams(q)}`, { redirect: "manual" });
        expect(res.status, error).to.equal(303);
        const loc = new URL(res.headers.get("location")!);
        expect(loc.origin + loc.pathname).to.equal(REDIRECT);
        expect(loc.searchParams.get("error"), JSON.stringify(q)).to.equal(error);
        expect(loc.searchParams.get("state")).to.equal("xyz");
        expect(loc.searchParams.get("iss")).to.equal(stack.url);
      }
    });

    it("refuses a vault the signed-in user does not own (invalid_target)", async () => {
      const user = await createUser(stack);
      const other = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      const back = await authorize(stack, jar, user.email, {
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: REDIRECT,
        code_challenge: pkce().challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
        resource: vaultUrn(other.vaultId),
        state: "s",
      });
      expect(back.searchParams.get("error")).to.equal("invalid_target");
      expect(back.searchParams.get("code")).to.equal(null);
    });

    it("a vault URN with its UUID in upper case binds that vault at authorize and at the code exchange", async () => {
      const user = await createUser(stack);
      const resource = vaultUrn(user.vaultId.toUpperCase());
      const consent = await consentCode(stack, user, createJar(stack.url), { resource: [resource] });
      const token = await postForm(`${stack.url}/oauth2/token`, codeExchangeForm(consent, { resource }));
      expect(token.status).to.equal(200);
      const claims = decodeJwt(token.body.access_token as string);
      expect([claims.vault_id, claims.aud]).to.deep.equal([user.vaultId, [stack.url, vaultUrn(user.vaultId)]]);
    });

    it("lets the user pick the vault when the resource is the MCP server URL", async () => {
      const { token, user } = await oauthGrant(stack, { resource: [`${stack.url}/mcp/write`] });
      expect(token.status).to.equal(200);
      expect(decodeJwt(token.body.access_token as string).vault_id).to.equal(user.vaultId);
    });

    it("takes the MCP server URL with or without its trailing slash, one resource either way", async () => {
      for (const resource of [stack.url, `${stack.url}/`]) {
        const { token, user } = await oauthGrant(stack, { resource: [resource] });
        expect(token.status, resource).to.equal(200);
        expect(decodeJwt(token.body.access_token as string).aud, resource).to.deep.equal([stack.url, vaultUrn(user.vaultId)]);
      }
    });

    it("a denied consent redirects with access_denied", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const back = await authorize(
        stack,
        createJar(stack.url),
        user.email,
        {
          response_type: "code",
          client_id: client.client_id,
          redirect_uri: REDIRECT,
          code_challenge: pkce().challenge,
          code_challenge_method: "S256",
          scope: "accounts:read",
          resource: vaultUrn(user.vaultId),
          state: "d",
        },
        "deny",
      );
      expect(back.searchParams.get("error")).to.equal("access_denied");
      expect(back.searchParams.get("state")).to.equal("d");
    });

    it("requires step-up for payments:initiate and marks the token acr=step-up", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      await signIn(stack, jar, user.email);
      const { challenge, verifier } = pkce();
      const q = new URLSearchParams({
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: REDIRECT,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "payments:initiate",
        resource: vaultUrn(user.vaultId),
        state: "s",
      });
      const first = await jar.get(`/oauth2/authorize?${q}`);
      expect(first.status).to.equal(303);
      expect(first.headers.get("location")).to.match(/^\/stepup\?/);
      // Posting a decision without the step-up is refused back to the step-up page.
      const back = await authorize(stack, jar, user.email, Object.fromEntries(q));
      const token = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "authorization_code",
        code: back.searchParams.get("code")!,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        client_id: client.client_id,
        client_secret: client.client_secret,
      });
      expect(token.status).to.equal(200);
      const claims = decodeJwt(token.body.access_token as string);
      expect(claims.acr).to.equal("step-up");
      expect(claims.auth_time).to.be.a("number");
    });

    it("rejects a decision without the CSRF token", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      await signIn(stack, jar, user.email);
      const q = new URLSearchParams({
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: REDIRECT,
        code_challenge: pkce().challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
        resource: vaultUrn(user.vaultId),
        state: "s",
      });
      const consent = await jar.get(`/oauth2/authorize?${q}`);
      const fields = formFields(await consent.text(), "/oauth2/authorize/decision");
      const res = await jar.post("/oauth2/authorize/decision", { ...fields, csrf: "forged", decision: "approve" });
      expect(res.status).to.equal(403);
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM authorization_codes WHERE client_id = ?`, [client.client_id]);
      expect(rows[0].n).to.equal(0);
    });
  });
});
