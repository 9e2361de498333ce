import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, jwtVerify, SignJWT, type JSONWebKeySet } from "jose";
import { startStack, TEST_AUDIENCE, type TestStack } from "../../support/stack.js";
import { oauthGrant } from "../../support/agent-oauth.js";
import { basic, createPartner, postToken, type TestPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { requirePostgres } from "../../support/db.js";
import { balanceCall, expectAccessLive, refreshHttp, type Creds } from "../../support/token-races.js";
import { expectJsonRpcError } from "../../support/refusals.js";

type Lineage = { client: Creds; access: string[]; refresh: string };
type PartnerUser = TestPartner & { userId: string; tokens: string[] };

/**
 * Refreshes and partner token mints keep going while the signing key is rotated, and while the old
 * key is retired: nothing is refused with a 5xx, the JWKS holds the key of every token that is
 * still good, and every token handed out stays good at the agent tools and the partner API for its hour.
 */
describe("signing keys under load: rotation and retirement during refreshes and partner mints (PostgreSQL only)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the token requests and the key change run on connections of their own");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const kidOf = (token: string) => decodeProtectedHeader(token).kid!;
  async function jwks(): Promise<JSONWebKeySet> {
    const res = await fetch(`${stack.url}/.well-known/agent-jwks.json`);
    expect(res.status).to.equal(200);
    return (await res.json()) as JSONWebKeySet;
  }
  /** The token's key is published now, and the published set verifies it (as a verifier outside Vaultgate would). */
  async function expectPublished(token: string, audience: string) {
    const set = await jwks();
    expect(set.keys.map((k) => k.kid)).to.include(kidOf(token));
    await jwtVerify(token, createLocalJWKSet(set), { issuer: stack.issuer, audience, currentDate: stack.clock(), clockTolerance: 30 });
  }
  const kyc = (p: PartnerUser, token: string) => fetch(`${stack.url}/api/partner/users/${p.userId}/kyc`, { headers: { authorization: `Bearer ${token}` } });

  async function lineages(n: number): Promise<Lineage[]> {
    const out: Lineage[] = [];
    for (let i = 0; i < n; i++) {
      const g = await oauthGrant(stack);
      out.push({ client: g.client, access: [g.token.body.access_token as string], refresh: g.token.body.refresh_token as string });
    }
    return out;
  }
  async function partners(n: number): Promise<PartnerUser[]> {
    const out: PartnerUser[] = [];
    for (let i = 0; i < n; i++) {
      const p = await createPartner(stack);
      out.push({ ...p, userId: (await createUserFor(stack, p)).userId, tokens: [] });
    }
    return out;
  }

  /** Refreshes the lineage `n` times in a row; each answer must be tokens whose key the JWKS publishes. */
  async function refreshOn(l: Lineage, n: number, answered = () => {}) {
    for (let i = 0; i < n; i++) {
      const res = await refreshHttp(stack, l.client, l.refresh);
      expect(res.status, JSON.stringify(res.body)).to.equal(200);
      l.access.push(res.body.access_token as string);
      l.refresh = res.body.refresh_token as string;
      answered();
      await expectPublished(res.body.access_token as string, stack.mcpUrl);
    }
  }
  /** Mints `n` partner tokens one after another, each published as it is handed out. */
  async function mint(p: PartnerUser, n: number) {
    for (let i = 0; i < n; i++) {
      const res = await postToken(stack.url, "grant_type=client_credentials", { authorization: basic(p.clientId, p.clientSecret) });
      expect(res.status, await res.clone().text()).to.equal(200);
      const token = ((await res.json()) as { access_token: string }).access_token;
      p.tokens.push(token);
      await expectPublished(token, TEST_AUDIENCE);
    }
  }
  /** The latest agent token of each lineage and every partner token work at their resource servers now. */
  async function expectAllGood(ls: Lineage[], ps: PartnerUser[]) {
    for (const l of ls) await expectAccessLive(stack, l.access.at(-1)!);
    for (const p of ps) for (const t of p.tokens) expect((await kyc(p, t)).status).to.equal(200);
  }

  it("a rotation amid refreshes and mints: every token handed out is published and good for its whole hour", async () => {
    const ls = await lineages(6);
    const ps = await partners(3);
    await Promise.all(ps.map((p) => mint(p, 2)));
    const oldKid = kidOf(ps[0]!.tokens[0]!);
    // The rotation starts once the first refresh has answered, with the rest still coming.
    let answered!: () => void;
    const firstAnswer = new Promise<void>((resolve) => {
      answered = resolve;
    });
    const load = Promise.all([...ls.map((l) => refreshOn(l, 4, answered)), ...ps.map((p) => mint(p, 6))]);
    const rotated = await firstAnswer.then(() => stack.admin.grants.rotateSigningKey({}));
    await load;
    expect(rotated.kid).to.not.equal(oldKid);
    // One more round after the rotation: these are the new key's.
    await Promise.all([...ls.map((l) => refreshOn(l, 1)), ...ps.map((p) => mint(p, 1))]);
    expect(kidOf(ls[0]!.access.at(-1)!)).to.equal(rotated.kid);
    await expectAllGood(ls, ps);

    // Ten seconds before the hour ends (all were issued at one instant of the test clock), both keys still serve.
    stack.clock.advance(3590_000);
    await expectAllGood(ls, ps);
    for (const t of [...ls.flatMap((l) => l.access), ...ps.flatMap((p) => p.tokens)])
      await expectPublished(t, decodeJwt(t).aud === TEST_AUDIENCE ? TEST_AUDIENCE : stack.mcpUrl);
    // Once every token the old key signed has expired (with the skew), the old key leaves the JWKS.
    stack.clock.advance(41_000);
    // Other files' stacks share this database and publish their own keys: only these two matter here.
    expect((await jwks()).keys.map((k) => k.kid))
      .to.include(rotated.kid)
      .and.not.include(oldKid);
  });

  it("retiring the old key amid refreshes and mints: its tokens are refused with 401, never a 5xx; every other token stays good", async () => {
    const ls = await lineages(4);
    const kept = await lineages(1);
    const ps = await partners(2);
    await Promise.all(ps.map((p) => mint(p, 2)));
    const old = stack.core.keyring.current()!;
    const oldTokens = { agent: kept[0]!.access[0]!, partner: ps[0]!.tokens.splice(0), other: ps[1]!.tokens.splice(0) };
    await stack.admin.grants.rotateSigningKey({});
    // Whoever holds the old private key signs a token dated after the rotation: refused before and after the retirement.
    const iat = Math.floor(stack.clock().getTime() / 1000) + 1;
    const forged = await new SignJWT({ ...decodeJwt(oldTokens.partner[0]!), jti: randomUUID(), iat, nbf: iat, exp: iat + 3600 })
      .setProtectedHeader({ alg: "ES256", typ: "at+jwt", kid: old.kid })
      .sign(old.privateKey);
    const oldUses = Array.from({ length: 12 }, (_, i) => (i % 2 ? kyc(ps[0]!, forged) : kyc(ps[0]!, oldTokens.partner[i % oldTokens.partner.length]!)));

    const [retired] = await Promise.all([
      stack.admin.grants.retireSigningKey({ kid: old.kid }),
      ...ls.map((l) => refreshOn(l, 3)),
      ...ps.map((p) => mint(p, 5)),
      ...Array.from({ length: 6 }, () => jwks()),
    ]);
    // During the race an old token was either still good or refused as invalid; a forged one always refused.
    for (const [i, res] of (await Promise.all(oldUses)).entries()) {
      expect(res.status).to.be.oneOf(i % 2 ? [401] : [200, 401]);
    }
    expect(retired.publishedKids).to.not.include(old.kid);
    expect((await jwks()).keys.map((k) => k.kid)).to.not.include(old.kid);

    for (const [p, t] of [...[...oldTokens.partner, forged].map((t) => [ps[0]!, t] as const), ...oldTokens.other.map((t) => [ps[1]!, t] as const)]) {
      const res = await kyc(p, t);
      expect(res.status).to.equal(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).to.equal("invalid_token");
    }
    const agentRes = await balanceCall(stack, oldTokens.agent);
    expect(agentRes.status).to.equal(401);
    expectJsonRpcError(agentRes, -32001, "invalid_token");
    // What was handed out after the rotation is the new key's, published, and good.
    for (const t of [...ls.flatMap((l) => l.access.slice(1)), ...ps.flatMap((p) => p.tokens)]) expect(kidOf(t)).to.not.equal(old.kid);
    await expectAllGood(ls, ps);
    // The kept lineage's refresh token outlives its key: its next access token is the new key's.
    await refreshOn(kept[0]!, 1);
    await expectAccessLive(stack, kept[0]!.access.at(-1)!);
  });
});
