import { createHash } from "node:crypto";
import { expect } from "chai";
import { decodeJwt } from "jose";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient } from "../../support/agent-oauth.js";
import { basic } from "../../support/partners.js";
import { codeExchangeForm, REDIRECT, oauthGrant, vaultUrn, verifyReason } from "../../support/agent-oauth.js";

describe("agent OAuth over HTTP: tokens, refresh rotation and revocation", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  describe("token endpoint", () => {
    it("exchanges a code for exactly the token response (client_secret_post)", async () => {
      const { token, back, user, client } = await oauthGrant(stack);
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
      expect(claims.aud).to.deep.equal([stack.url, vaultUrn(user.vaultId)]);
      expect(claims.acr).to.equal(undefined);
      const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: token.body.access_token as string });
      expect(grant!.clientId).to.equal(client.client_id);
      expect(grant!.agentPrincipalId).to.equal((claims.act as { sub: string }).sub);
      // One agent principal per user+client, created on first consent.
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM oauth_agents WHERE user_id = ? AND client_id = ?`, [
        user.userId,
        client.client_id,
      ]);
      expect(rows[0].n).to.equal(1);
    });

    it("a client registered without refresh_token is issued none and may not refresh", async () => {
      const { token, client } = await oauthGrant(stack, { register: { grant_types: ["authorization_code"] } });
      expect(token.status).to.equal(200);
      expect(Object.keys(token.body).sort()).to.deep.equal(["access_token", "expires_in", "jti", "scope", "token_type"]);
      const { rows } = await stack.core.db.raw(`SELECT refresh_hash FROM grants WHERE id = ?`, [token.body.jti as string]);
      expect(rows[0].refresh_hash).to.equal(null);
      // Refused for the grant type before any token is looked at: even a live one of another client.
      const other = await oauthGrant(stack);
      const refresh = (c: { client_id: string; client_secret: string }) =>
        postForm(`${stack.url}/oauth2/token`, {
          grant_type: "refresh_token",
          refresh_token: other.token.body.refresh_token as string,
          client_id: c.client_id,
          client_secret: c.client_secret,
        });
      const refused = await refresh(client);
      expect([refused.status, refused.body.error]).to.deep.equal([400, "unauthorized_client"]);
      expect((await refresh(other.client)).status).to.equal(200);
      // Nor does the agent's own reissue or an operator's grant for this client carry one.
      const reissued = await stack.clients.grants.supersedeGrant({ accessToken: token.body.access_token as string });
      expect([reissued.token!.jti.length > 0, reissued.token!.refreshToken]).to.deep.equal([true, ""]);
      const user = await createUser(stack);
      const operator = await stack.admin.grants.issueGrant({
        userId: user.userId,
        vaultId: user.vaultId,
        scopes: ["accounts:read"],
        clientId: client.client_id,
      });
      expect(operator.token!.refreshToken).to.equal("");
      const withRefresh = await stack.admin.grants.issueGrant({
        userId: user.userId,
        vaultId: user.vaultId,
        scopes: ["accounts:read"],
        clientId: other.client.client_id,
      });
      expect(withRefresh.token!.refreshToken).to.match(/^vgr_/);
    });

    it("stores codes and refresh tokens only as SHA-256", async () => {
      const { token, code } = await oauthGrant(stack);
      const sha = (v: string) => createHash("sha256").update(v).digest("hex");
      const codes = await stack.core.db.raw(`SELECT count(*)::int AS n FROM authorization_codes WHERE code_hash = ?`, [sha(code)]);
      expect(codes.rows[0].n).to.equal(1);
      const grants = await stack.core.db.raw(`SELECT refresh_hash FROM grants WHERE id = ?`, [token.body.jti as string]);
      expect(grants.rows[0].refresh_hash).to.equal(sha(token.body.refresh_token as string));
      const leaked = await stack.core.db.raw(`SELECT count(*)::int AS n FROM authorization_codes a, grants g WHERE a.code_hash = ? OR g.refresh_hash = ?`, [
        code,
        token.body.refresh_token as string,
      ]);
      expect(leaked.rows[0].n).to.equal(0);
    });

    it("accepts client_secret_basic", async () => {
      const { token } = await oauthGrant(stack, { auth: "basic" });
      expect(token.status).to.equal(200);
    });

    it("a replayed code is refused and revokes the grant it issued", async () => {
      const { token, code, verifier, client } = await oauthGrant(stack);
      const again = await postForm(`${stack.url}/oauth2/token`, codeExchangeForm({ client, code, verifier }));
      expect(again.status).to.equal(400);
      expect(again.body.error).to.equal("invalid_grant");
      expect(await verifyReason(stack, token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      const refresh = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "refresh_token",
        refresh_token: token.body.refresh_token as string,
        client_id: client.client_id,
        client_secret: client.client_secret,
      });
      expect(refresh.body.error).to.equal("invalid_grant");
    });

    it("refuses a wrong PKCE verifier, another redirect URI, an expired code, and a wrong client", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const other = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      const codeFor = async () => {
        const p = pkce();
        const back = await authorize(stack, jar, user.email, {
          response_type: "code",
          client_id: client.client_id,
          redirect_uri: REDIRECT,
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          scope: "accounts:read",
          resource: vaultUrn(user.vaultId),
          state: "s",
        });
        return { code: back.searchParams.get("code")!, verifier: p.verifier };
      };
      const exchange = (f: Record<string, string>, c = client) =>
        postForm(`${stack.url}/oauth2/token`, {
          grant_type: "authorization_code",
          redirect_uri: REDIRECT,
          client_id: c.client_id,
          client_secret: c.client_secret,
          ...f,
        });

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
        const back = await authorize(stack, jar, user.email, {
          response_type: "code",
          client_id: client.client_id,
          redirect_uri: REDIRECT,
          code_challenge: p.challenge,
          code_challenge_method: "S256",
          scope: "accounts:read",
          resource: vaultUrn(user.vaultId),
          state: "s",
        });
        codes.push({ code: back.searchParams.get("code")!, verifier: p.verifier });
      }
      const exchange = (c: { code: string; verifier: string }) =>
        postForm(`${stack.url}/oauth2/token`, {
          grant_type: "authorization_code",
          code: c.code,
          redirect_uri: REDIRECT,
          code_verifier: c.verifier,
          client_id: client.client_id,
          client_secret: client.client_secret,
        });
      // Seven different codes and the eighth three times, all in flight at once.
      const results = await Promise.all([...codes.slice(0, 7), codes[7]!, codes[7]!, codes[7]!].map(exchange));
      const distinct = results.slice(0, 7);
      expect(distinct.map((r) => r.status)).to.deep.equal(new Array(7).fill(200));
      expect(new Set(distinct.map((r) => r.body.jti)).size).to.equal(7);
      for (const r of distinct) expect(await verifyReason(stack, r.body.access_token as string)).to.equal("ok");
      const same = results.slice(7);
      expect(same.filter((r) => r.status === 200)).to.have.length(1);
      expect(same.filter((r) => r.body.error === "invalid_grant")).to.have.length(2);
      // RFC 6749 4.1.2: the replays revoked what the code had issued.
      expect(await verifyReason(stack, same.find((r) => r.status === 200)!.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM audit_records WHERE action = 'oauth.code_exchange' AND actor = ?`, [
        `client:${client.client_id}`,
      ]);
      expect(rows[0].n).to.equal(8);
    });

    it("answers invalid_client with 401 and a Basic challenge; both methods at once is invalid_request", async () => {
      const client = (await registerClient(stack)).body;
      const bad = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "refresh_token",
        refresh_token: "vgr_x",
        client_id: client.client_id,
        client_secret: "wrong",
      });
      expect(bad.status).to.equal(401);
      expect(bad.body.error).to.equal("invalid_client");
      expect(bad.headers.get("www-authenticate")).to.match(/^Basic realm=/);
      const unknown = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "refresh_token",
        refresh_token: "vgr_x",
        client_id: "agc_nobody",
        client_secret: "wrong",
      });
      expect(unknown.status).to.equal(401);
      expect(unknown.body).to.deep.equal(bad.body);
      const both = await postForm(
        `${stack.url}/oauth2/token`,
        { grant_type: "refresh_token", refresh_token: "x", client_secret: "s" },
        { authorization: basic(client.client_id, client.client_secret) },
      );
      expect(both.status).to.equal(400);
      expect(both.body.error).to.equal("invalid_request");
      const unsupported = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "password",
        client_id: client.client_id,
        client_secret: client.client_secret,
      });
      expect(unsupported.body.error).to.equal("unsupported_grant_type");
      const dup = await fetch(`${stack.url}/oauth2/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=refresh_token&grant_type=refresh_token",
      });
      expect(dup.status).to.equal(400);
      expect(((await dup.json()) as { error: string }).error).to.equal("invalid_request");
      expect(stack.logs.text()).to.not.include(client.client_secret);
    });

    it("refuses other content types and oversized bodies with invalid_request", async () => {
      const json = await fetch(`${stack.url}/oauth2/token`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ grant_type: "refresh_token" }),
      });
      expect(json.status).to.equal(400);
      expect(((await json.json()) as { error: string }).error).to.equal("invalid_request");
      const big = await fetch(`${stack.url}/oauth2/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `grant_type=refresh_token&refresh_token=${"a".repeat(9000)}`,
      });
      expect(big.status).to.equal(400);
      expect(((await big.json()) as { error: string }).error).to.equal("invalid_request");
    });
  });

  describe("refresh rotation", () => {
    const refresh = (client: { client_id: string; client_secret: string }, refreshToken: string) =>
      postForm(
        `${stack.url}/oauth2/token`,
        { grant_type: "refresh_token", refresh_token: refreshToken },
        { authorization: basic(client.client_id, client.client_secret) },
      );

    it("issues a new grant, supersedes the old one, and a lost-response retry in the grace window gets the same pair", async () => {
      const { token, client } = await oauthGrant(stack);
      const r1 = await refresh(client, token.body.refresh_token as string);
      expect(r1.status).to.equal(200);
      expect(r1.body.jti).to.not.equal(token.body.jti);
      expect(await verifyReason(stack, token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      expect(await verifyReason(stack, r1.body.access_token as string)).to.equal("ok");
      stack.clock.advance(10_000);
      const retry = await refresh(client, token.body.refresh_token as string);
      expect(retry.status).to.equal(200);
      expect(retry.body.jti).to.equal(r1.body.jti);
      expect(retry.body.refresh_token).to.equal(r1.body.refresh_token);
      expect(await verifyReason(stack, r1.body.access_token as string)).to.equal("ok");
    });

    it("grant ids (jti) are UUID version 7: each grant's carries the time it was issued, so later grants sort later", async () => {
      const { token, client } = await oauthGrant(stack);
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
      const { token, client } = await oauthGrant(stack);
      const r1 = await refresh(client, token.body.refresh_token as string);
      stack.clock.advance(31_000);
      const reuse = await refresh(client, token.body.refresh_token as string);
      expect(reuse.status).to.equal(400);
      expect(reuse.body.error).to.equal("invalid_grant");
      expect(await verifyReason(stack, r1.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
      expect((await refresh(client, r1.body.refresh_token as string)).body.error).to.equal("invalid_grant");
    });

    it("reuse once the successor was itself refreshed revokes the lineage even inside the window", async () => {
      const { token, client } = await oauthGrant(stack);
      const r1 = await refresh(client, token.body.refresh_token as string);
      const r2 = await refresh(client, r1.body.refresh_token as string);
      const reuse = await refresh(client, token.body.refresh_token as string);
      expect(reuse.body.error).to.equal("invalid_grant");
      expect(await verifyReason(stack, r2.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
    });

    it("another client cannot use the refresh token", async () => {
      const { token } = await oauthGrant(stack);
      const other = (await registerClient(stack)).body;
      const res = await refresh(other, token.body.refresh_token as string);
      expect(res.body.error).to.equal("invalid_grant");
      expect(await verifyReason(stack, token.body.access_token as string)).to.equal("ok");
    });

    it("many lineages refreshed at once each get refresh tokens of their own, twice over; another client's token is refused", async () => {
      const lineages = [];
      for (let i = 0; i < 12; i++) lineages.push(await oauthGrant(stack));
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
      for (const r of round2) expect(await verifyReason(stack, r.body.access_token as string)).to.equal("ok");
    });

    it("concurrent refreshes of one token never make two lineages", async () => {
      const { token, client, user } = await oauthGrant(stack);
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
      const a = await oauthGrant(stack);
      const res = await postForm(`${stack.url}/oauth2/revoke`, {
        token: a.token.body.refresh_token as string,
        token_type_hint: "refresh_token",
        client_id: a.client.client_id,
        client_secret: a.client.client_secret,
      });
      expect(res.status).to.equal(200);
      expect(await verifyReason(stack, a.token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);

      const b = await oauthGrant(stack);
      const res2 = await postForm(
        `${stack.url}/oauth2/revoke`,
        { token: b.token.body.access_token as string },
        { authorization: basic(b.client.client_id, b.client.client_secret) },
      );
      expect(res2.status).to.equal(200);
      expect(await verifyReason(stack, b.token.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);

      const unknown = await postForm(`${stack.url}/oauth2/revoke`, {
        token: "vgr_unknown",
        client_id: b.client.client_id,
        client_secret: b.client.client_secret,
      });
      expect(unknown.status).to.equal(200);
      const noAuth = await postForm(`${stack.url}/oauth2/revoke`, { token: "x" });
      expect(noAuth.status).to.equal(401);
    });
  });
});
