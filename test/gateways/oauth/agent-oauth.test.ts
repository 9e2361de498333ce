import { createHash } from "node:crypto";
import { expect } from "chai";
import { decodeJwt } from "jose";
import { ConnectError } from "@connectrpc/connect";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf } from "../../../core/errors.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, formFields, pkce, postForm, registerClient, signIn } from "../../support/agent-oauth.js";
import { basic } from "../../support/partners.js";

const REDIRECT = "http://127.0.0.1:9/callback";

describe("agent OAuth over HTTP (spec 2.3, 2.4, 3.2, 4.2-4.4)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const urn = (vaultId: string) => `urn:vaultgate:vault:${vaultId}`;

  async function verifyReason(accessToken: string): Promise<Reason | "ok"> {
    try {
      await stack.clients.grants.verifyAgentToken({ accessToken });
      return "ok";
    } catch (err) {
      expect(err).to.be.instanceOf(ConnectError);
      return errorDetailOf(err)!.reason;
    }
  }

  /** Registration, sign-in, consent and code exchange; returns everything a test needs. */
  async function grantFor(opts: { scope?: string; resource?: string[]; auth?: "post" | "basic" } = {}) {
    const user = await createUser(stack);
    const client = (await registerClient(stack)).body;
    const jar = createJar(stack.url);
    const { verifier, challenge } = pkce();
    const back = await authorize(stack, jar, user.email, {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: opts.scope ?? "accounts:read",
      resource: opts.resource ?? [urn(user.vaultId)],
      state: "st-1",
    });
    const code = back.searchParams.get("code")!;
    const form = { grant_type: "authorization_code", code, redirect_uri: REDIRECT, code_verifier: verifier };
    const token =
      opts.auth === "basic"
        ? await postForm(`${stack.url}/oauth2/token`, form, { authorization: basic(client.client_id, client.client_secret) })
        : await postForm(`${stack.url}/oauth2/token`, { ...form, client_id: client.client_id, client_secret: client.client_secret });
    return { user, client, jar, back, code, verifier, token };
  }

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

    it("registers a client and returns the spec 2.3 fields once", async () => {
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
        [{ grant_types: ["client_credentials"] }, "invalid_client_metadata"],
        [{ response_types: ["token"] }, "invalid_client_metadata"],
        [{ token_endpoint_auth_method: "none" }, "invalid_client_metadata"],
        [{ scope: "accounts:read treasury:write" }, "invalid_client_metadata"],
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

    it("redirects protocol errors to the registered URI with state and iss", async () => {
      const client = (await registerClient(stack, { scope: "accounts:read" })).body;
      const { challenge } = pkce();
      const good = { response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: challenge, code_challenge_method: "S256", scope: "accounts:read", state: "xyz" };
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
        resource: urn(other.vaultId),
        state: "s",
      });
      expect(back.searchParams.get("error")).to.equal("invalid_target");
      expect(back.searchParams.get("code")).to.equal(null);
    });

    it("lets the user pick the vault when the resource is the MCP server URL", async () => {
      const { token, user } = await grantFor({ resource: [`${stack.url}/mcp/write`] });
      expect(token.status).to.equal(200);
      expect(decodeJwt(token.body.access_token as string).vault_id).to.equal(user.vaultId);
    });

    it("a denied consent redirects with access_denied", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const back = await authorize(
        stack,
        createJar(stack.url),
        user.email,
        { response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: pkce().challenge, code_challenge_method: "S256", scope: "accounts:read", resource: urn(user.vaultId), state: "d" },
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
      const q = new URLSearchParams({ response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: challenge, code_challenge_method: "S256", scope: "payments:initiate", resource: urn(user.vaultId), state: "s" });
      const first = await jar.get(`/oauth2/authorize?${q}`);
      expect(first.status).to.equal(303);
      expect(first.headers.get("location")).to.match(/^\/stepup\?/);
      // Posting a decision without the step-up is refused back to the step-up page.
      const back = await authorize(stack, jar, user.email, Object.fromEntries(q));
      const token = await postForm(`${stack.url}/oauth2/token`, { grant_type: "authorization_code", code: back.searchParams.get("code")!, redirect_uri: REDIRECT, code_verifier: verifier, client_id: client.client_id, client_secret: client.client_secret });
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
      const q = new URLSearchParams({ response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: pkce().challenge, code_challenge_method: "S256", scope: "accounts:read", resource: urn(user.vaultId), state: "s" });
      const consent = await jar.get(`/oauth2/authorize?${q}`);
      const fields = formFields(await consent.text(), "/oauth2/authorize/decision");
      const res = await jar.post("/oauth2/authorize/decision", { ...fields, csrf: "forged", decision: "approve" });
      expect(res.status).to.equal(403);
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM authorization_codes WHERE client_id = ?`, [client.client_id]);
      expect(rows[0].n).to.equal(0);
    });
  });

  describe("token endpoint", () => {
    it("exchanges a code for exactly the spec 2.4 response (client_secret_post)", async () => {
      const { token, back, user, client } = await grantFor();
      expect(back.searchParams.get("state")).to.equal("st-1");
      expect(back.searchParams.get("iss")).to.equal(stack.url);
      expect(token.status).to.equal(200);
      expect(token.headers.get("cache-control")).to.equal("no-store");
      expect(Object.keys(token.body).sort()).to.deep.equal(["access_token", "expires_in", "jti", "refresh_token", "scope", "token_type"]);
      expect(token.body.token_type).to.equal("Bearer");
      expect(token.body.expires_in).to.equal(3600);
      expect(token.body.scope).to.equal("accounts:read");
      const claims = decodeJwt(token.body.access_token as string);
      expect(claims.jti).to.equal(token.body.jti);
      expect(claims.sub).to.equal(user.userId);
      expect(claims.client_id).to.equal(client.client_id);
      expect(claims.aud).to.deep.equal([stack.url, urn(user.vaultId)]);
      expect(claims.acr).to.equal(undefined);
      const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: token.body.access_token as string });
      expect(grant!.clientId).to.equal(client.client_id);
      expect(grant!.agentPrincipalId).to.equal((claims.act as { sub: string }).sub);
      // One agent principal per user+client, created on first consent.
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM oauth_agents WHERE user_id = ? AND client_id = ?`, [user.userId, client.client_id]);
      expect(rows[0].n).to.equal(1);
    });

    it("stores codes and refresh tokens only as SHA-256", async () => {
      const { token, code } = await grantFor();
      const sha = (v: string) => createHash("sha256").update(v).digest("hex");
      const codes = await stack.core.db.raw(`SELECT count(*)::int AS n FROM authorization_codes WHERE code_hash = ?`, [sha(code)]);
      expect(codes.rows[0].n).to.equal(1);
      const grants = await stack.core.db.raw(`SELECT refresh_hash FROM grants WHERE id = ?`, [token.body.jti as string]);
      expect(grants.rows[0].refresh_hash).to.equal(sha(token.body.refresh_token as string));
      const leaked = await stack.core.db.raw(
        `SELECT count(*)::int AS n FROM authorization_codes a, grants g WHERE a.code_hash = ? OR g.refresh_hash = ?`,
        [code, token.body.refresh_token as string],
      );
      expect(leaked.rows[0].n).to.equal(0);
    });

    it("accepts client_secret_basic", async () => {
      const { token } = await grantFor({ auth: "basic" });
      expect(token.status).to.equal(200);
    });

    it("a replayed code is refused and revokes the grant it issued", async () => {
      const { token, code, verifier, client } = await grantFor();
      const again = await postForm(`${stack.url}/oauth2/token`, { grant_type: "authorization_code", code, redirect_uri: REDIRECT, code_verifier: verifier, client_id: client.client_id, client_secret: client.client_secret });
      expect(again.status).to.equal(400);
      expect(again.body.error).to.equal("invalid_grant");
      expect(await verifyReason(token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      const refresh = await postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: token.body.refresh_token as string, client_id: client.client_id, client_secret: client.client_secret });
      expect(refresh.body.error).to.equal("invalid_grant");
    });

    it("refuses a wrong PKCE verifier, another redirect URI, an expired code, and a wrong client", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const other = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      const codeFor = async () => {
        const p = pkce();
        const back = await authorize(stack, jar, user.email, { response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: p.challenge, code_challenge_method: "S256", scope: "accounts:read", resource: urn(user.vaultId), state: "s" });
        return { code: back.searchParams.get("code")!, verifier: p.verifier };
      };
      const exchange = (f: Record<string, string>, c = client) => postForm(`${stack.url}/oauth2/token`, { grant_type: "authorization_code", redirect_uri: REDIRECT, client_id: c.client_id, client_secret: c.client_secret, ...f });

      const a = await codeFor();
      expect((await exchange({ code: a.code, code_verifier: pkce().verifier })).body.error).to.equal("invalid_grant");
      expect((await exchange({ code: a.code, code_verifier: a.verifier, redirect_uri: "http://127.0.0.1:9/other" })).body.error).to.equal("invalid_grant");
      expect((await exchange({ code: a.code, code_verifier: a.verifier }, other)).body.error).to.equal("invalid_grant");
      // The failed attempts did not consume the code.
      expect((await exchange({ code: a.code, code_verifier: a.verifier })).status).to.equal(200);

      const b = await codeFor();
      stack.clock.advance(61_000);
      expect((await exchange({ code: b.code, code_verifier: b.verifier })).body.error).to.equal("invalid_grant");
    });

    it("exchanges arriving together each get their own grant; one code sent several times at once issues once, then the replay revokes it", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      const codes: { code: string; verifier: string }[] = [];
      for (let i = 0; i < 8; i++) {
        const p = pkce();
        const back = await authorize(stack, jar, user.email, { response_type: "code", client_id: client.client_id, redirect_uri: REDIRECT, code_challenge: p.challenge, code_challenge_method: "S256", scope: "accounts:read", resource: urn(user.vaultId), state: "s" });
        codes.push({ code: back.searchParams.get("code")!, verifier: p.verifier });
      }
      const exchange = (c: { code: string; verifier: string }) =>
        postForm(`${stack.url}/oauth2/token`, { grant_type: "authorization_code", code: c.code, redirect_uri: REDIRECT, code_verifier: c.verifier, client_id: client.client_id, client_secret: client.client_secret });
      // Seven different codes and the eighth three times, all in flight at once.
      const results = await Promise.all([...codes.slice(0, 7), codes[7]!, codes[7]!, codes[7]!].map(exchange));
      const distinct = results.slice(0, 7);
      expect(distinct.map((r) => r.status)).to.deep.equal(new Array(7).fill(200));
      expect(new Set(distinct.map((r) => r.body.jti)).size).to.equal(7);
      for (const r of distinct) expect(await verifyReason(r.body.access_token as string)).to.equal("ok");
      const same = results.slice(7);
      expect(same.filter((r) => r.status === 200)).to.have.length(1);
      expect(same.filter((r) => r.body.error === "invalid_grant")).to.have.length(2);
      // RFC 6749 4.1.2: the replays revoked what the code had issued.
      expect(await verifyReason(same.find((r) => r.status === 200)!.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM audit_records WHERE action = 'oauth.code_exchange' AND actor = ?`, [`client:${client.client_id}`]);
      expect(rows[0].n).to.equal(8);
    });

    it("answers invalid_client with 401 and a Basic challenge; both methods at once is invalid_request", async () => {
      const client = (await registerClient(stack)).body;
      const bad = await postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: "vgr_x", client_id: client.client_id, client_secret: "wrong" });
      expect(bad.status).to.equal(401);
      expect(bad.body.error).to.equal("invalid_client");
      expect(bad.headers.get("www-authenticate")).to.match(/^Basic realm=/);
      const unknown = await postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: "vgr_x", client_id: "agc_nobody", client_secret: "wrong" });
      expect(unknown.status).to.equal(401);
      expect(unknown.body).to.deep.equal(bad.body);
      const both = await postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: "x", client_secret: "s" }, { authorization: basic(client.client_id, client.client_secret) });
      expect(both.status).to.equal(400);
      expect(both.body.error).to.equal("invalid_request");
      const unsupported = await postForm(`${stack.url}/oauth2/token`, { grant_type: "password", client_id: client.client_id, client_secret: client.client_secret });
      expect(unsupported.body.error).to.equal("unsupported_grant_type");
      const dup = await fetch(`${stack.url}/oauth2/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: "grant_type=refresh_token&grant_type=refresh_token" });
      expect(dup.status).to.equal(400);
      expect(((await dup.json()) as { error: string }).error).to.equal("invalid_request");
      expect(stack.logs.text()).to.not.include(client.client_secret);
    });

    it("refuses other content types and oversized bodies with invalid_request", async () => {
      const json = await fetch(`${stack.url}/oauth2/token`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ grant_type: "refresh_token" }) });
      expect(json.status).to.equal(400);
      expect(((await json.json()) as { error: string }).error).to.equal("invalid_request");
      const big = await fetch(`${stack.url}/oauth2/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: `grant_type=refresh_token&refresh_token=${"a".repeat(9000)}` });
      expect(big.status).to.equal(400);
      expect(((await big.json()) as { error: string }).error).to.equal("invalid_request");
    });
  });

  describe("refresh rotation (DESIGN 3)", () => {
    const refresh = (client: { client_id: string; client_secret: string }, refreshToken: string) =>
      postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: refreshToken }, { authorization: basic(client.client_id, client.client_secret) });

    it("issues a new grant, supersedes the old one, and a lost-response retry in the grace window gets the same pair", async () => {
      const { token, client } = await grantFor();
      const r1 = await refresh(client, token.body.refresh_token as string);
      expect(r1.status).to.equal(200);
      expect(r1.body.jti).to.not.equal(token.body.jti);
      expect(await verifyReason(token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      expect(await verifyReason(r1.body.access_token as string)).to.equal("ok");
      stack.clock.advance(10_000);
      const retry = await refresh(client, token.body.refresh_token as string);
      expect(retry.status).to.equal(200);
      expect(retry.body.jti).to.equal(r1.body.jti);
      expect(retry.body.refresh_token).to.equal(r1.body.refresh_token);
      expect(await verifyReason(r1.body.access_token as string)).to.equal("ok");
    });

    it("grant ids (jti) are UUID version 7: each grant's carries the time it was issued, so later grants sort later", async () => {
      const { token, client } = await grantFor();
      const r1 = await refresh(client, token.body.refresh_token as string);
      const r2 = await refresh(client, r1.body.refresh_token as string);
      const jtis = [token, r1, r2].map((t) => t.body.jti as string);
      const ms = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
      for (const jti of jtis) {
        expect(jti[14], jti).to.equal("7");
        expect("89ab", jti).to.include(jti[19]!);
        expect(Math.abs(ms(jti) - Date.now()), jti).to.be.below(60_000);
      }
      expect(ms(jtis[0]!)).to.be.at.most(ms(jtis[1]!));
      expect(ms(jtis[1]!)).to.be.at.most(ms(jtis[2]!));
    });

    it("a reused refresh token after the grace window revokes the whole lineage", async () => {
      const { token, client } = await grantFor();
      const r1 = await refresh(client, token.body.refresh_token as string);
      stack.clock.advance(31_000);
      const reuse = await refresh(client, token.body.refresh_token as string);
      expect(reuse.status).to.equal(400);
      expect(reuse.body.error).to.equal("invalid_grant");
      expect(await verifyReason(r1.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      expect((await refresh(client, r1.body.refresh_token as string)).body.error).to.equal("invalid_grant");
    });

    it("reuse once the successor was itself refreshed revokes the lineage even inside the window", async () => {
      const { token, client } = await grantFor();
      const r1 = await refresh(client, token.body.refresh_token as string);
      const r2 = await refresh(client, r1.body.refresh_token as string);
      const reuse = await refresh(client, token.body.refresh_token as string);
      expect(reuse.body.error).to.equal("invalid_grant");
      expect(await verifyReason(r2.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
    });

    it("another client cannot use the refresh token", async () => {
      const { token } = await grantFor();
      const other = (await registerClient(stack)).body;
      const res = await refresh(other, token.body.refresh_token as string);
      expect(res.body.error).to.equal("invalid_grant");
      expect(await verifyReason(token.body.access_token as string)).to.equal("ok");
    });

    it("many lineages refreshed at once each get refresh tokens of their own, twice over; another client's token is refused", async () => {
      const lineages = [];
      for (let i = 0; i < 12; i++) lineages.push(await grantFor());
      const first = lineages.map((l) => l.token.body.refresh_token as string);
      // All twelve in flight together: one group-committed batch on PostgreSQL.
      const round1 = await Promise.all(lineages.map((l, i) => refresh(l.client, first[i]!)));
      expect(round1.map((r) => r.status)).to.deep.equal(new Array(12).fill(200));
      const second = round1.map((r) => r.body.refresh_token as string);
      for (const t of second) expect(t).to.match(/^vgr_[A-Za-z0-9_-]{43}$/);
      expect(new Set([...first, ...second]).size).to.equal(24);
      // A lineage's token is no other client's: presented by the next lineage's client it is refused.
      const crossed = await refresh(lineages[1]!.client, second[0]!);
      expect(crossed.body.error).to.equal("invalid_grant");
      const round2 = await Promise.all(lineages.map((l, i) => refresh(l.client, second[i]!)));
      expect(round2.map((r) => r.status)).to.deep.equal(new Array(12).fill(200));
      expect(new Set([...first, ...second, ...round2.map((r) => r.body.refresh_token as string)]).size).to.equal(36);
      expect(new Set(round2.map((r) => r.body.jti)).size).to.equal(12);
      for (const r of round2) expect(await verifyReason(r.body.access_token as string)).to.equal("ok");
    });

    it("concurrent refreshes of one token never make two lineages", async () => {
      const { token, client, user } = await grantFor();
      const results = await Promise.all(Array.from({ length: 6 }, () => refresh(client, token.body.refresh_token as string)));
      const jtis = new Set(results.map((r) => r.body.jti));
      expect(results.every((r) => r.status === 200)).to.equal(true);
      expect(jtis.size).to.equal(1);
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM grants WHERE user_id = ? AND state = 'active'`, [user.userId]);
      expect(rows[0].n).to.equal(1);
    });
  });

  describe("revocation", () => {
    it("RFC 7009: revoking the refresh token or access token ends the grant at once; unknown tokens are 200", async () => {
      const a = await grantFor();
      const res = await postForm(`${stack.url}/oauth2/revoke`, { token: a.token.body.refresh_token as string, token_type_hint: "refresh_token", client_id: a.client.client_id, client_secret: a.client.client_secret });
      expect(res.status).to.equal(200);
      expect(await verifyReason(a.token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);

      const b = await grantFor();
      const res2 = await postForm(`${stack.url}/oauth2/revoke`, { token: b.token.body.access_token as string }, { authorization: basic(b.client.client_id, b.client.client_secret) });
      expect(res2.status).to.equal(200);
      expect(await verifyReason(b.token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);

      const unknown = await postForm(`${stack.url}/oauth2/revoke`, { token: "vgr_unknown", client_id: b.client.client_id, client_secret: b.client.client_secret });
      expect(unknown.status).to.equal(200);
      const noAuth = await postForm(`${stack.url}/oauth2/revoke`, { token: "x" });
      expect(noAuth.status).to.equal(401);
    });
  });
});
