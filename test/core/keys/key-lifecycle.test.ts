import { randomUUID, type KeyObject } from "node:crypto";
import { newP256PrivateKey } from "../../../lib/crypto.js";
import { expect } from "chai";
import { decodeJwt, decodeProtectedHeader, SignJWT, type JWTPayload } from "jose";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { AGENT_TOKEN_HEADER } from "../../../core/grants/access-token.js";
import { startStack, TEST_AUDIENCE, TEST_ISSUER, type TestStack } from "../../support/stack.js";
import { basic, createPartner, mintPartnerToken, postToken, type TestPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

/**
 * After `keys rotate` the previous key verifies only tokens issued before it and leaves the JWKS
 * once they expire; `keys retire` withdraws a key at once. On both token surfaces.
 */
describe("signing key lifecycle", function () {
  this.timeout(60_000);
  let stack: TestStack;
  beforeEach(async () => {
    stack = await startStack({ gateway: true });
  });
  afterEach(() => stack.close());

  const nowSeconds = (s: TestStack = stack) => Math.floor(s.clock().getTime() / 1000);

  /** What an attacker holding a private key would do: sign whatever claims with it. */
  async function signWith(key: { kid: string; privateKey: KeyObject }, claims: JWTPayload): Promise<string> {
    return new SignJWT(claims).setProtectedHeader({ alg: "ES256", typ: "at+jwt", kid: key.kid }).sign(key.privateKey);
  }

  function partnerClaims(partner: TestPartner, iat: number): JWTPayload {
    return {
      iss: TEST_ISSUER,
      aud: TEST_AUDIENCE,
      sub: partner.clientId,
      client_id: partner.clientId,
      scope: "kyc:read",
      jti: randomUUID(),
      iat,
      nbf: iat,
      exp: iat + 3600,
    };
  }

  /** The claims of a real agent token, moved to a new issue time. */
  function agentClaimsAt(token: string, iat: number): JWTPayload {
    return { ...decodeJwt(token), iat, nbf: iat, exp: iat + 3600 };
  }

  async function kyc(userId: string, token: string, s: TestStack = stack) {
    const res = await fetch(`${s.url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${token}` } });
    const body = (await res.json()) as { error?: { code: string } };
    return { status: res.status, error: body.error?.code };
  }

  /**
   * Whether /mcp/read authenticated the token; the tool result is not asserted here, since
   * acceptance is asserted exactly through VerifyAgentToken.
   */
  async function balance(token: string): Promise<"refused" | "authenticated"> {
    const res = await fetch(`${stack.url}/mcp/read`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "accounts.balance", params: {} }),
    });
    const body = (await res.json()) as { error?: { code: number; data?: { reason_id?: string } } };
    if (res.status === 401) {
      expect([body.error?.code, body.error?.data?.reason_id]).to.deep.equal([-32001, "invalid_token"]);
      return "refused";
    }
    expect(body.error?.data?.reason_id).to.not.equal("invalid_token");
    return "authenticated";
  }

  const verifyAgent = (accessToken: string) => stack.clients.grants.verifyAgentToken({ accessToken });

  async function jwksKids(s: TestStack = stack): Promise<string[]> {
    const res = await fetch(`${s.url}/.well-known/agent-jwks.json`);
    expect(res.status).to.equal(200);
    return ((await res.json()) as { keys: { kid: string }[] }).keys.map((k) => k.kid);
  }

  /** A partner with a consenting user, and an agent grant on another user's vault, both issued now. */
  async function fixtures() {
    const partner = await createPartner(stack);
    const { userId } = await createUserFor(stack, partner);
    const partnerToken = await mintPartnerToken(stack, partner);
    const owner = await stack.admin.partners.createUser({ email: `owner-${randomUUID()}@example.com` });
    const { token } = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] });
    return { partner, userId, partnerToken, agentToken: token!.accessToken };
  }

  function currentKey() {
    const k = stack.core.keyring.current();
    if (!k) throw new Error("the stack has no signing key");
    return { kid: k.kid, privateKey: k.privateKey };
  }

  it("after rotate, a token signed now with the old key is refused on both surfaces; tokens issued before still work", async () => {
    const f = await fixtures();
    const old = currentKey();
    expect(decodeProtectedHeader(f.partnerToken).kid).to.equal(old.kid);
    // Verified (and cached) before the rotation.
    expect((await kyc(f.userId, f.partnerToken)).status).to.equal(200);
    expect(await balance(f.agentToken)).to.equal("authenticated");

    const rotated = await stack.admin.grants.rotateSigningKey({});
    expect(rotated.kid).to.not.equal(old.kid);
    expect(rotated.publishedKids).to.include.members([old.kid, rotated.kid]);
    stack.clock.advance(2_000);
    const now = nowSeconds();

    // Hostile: the old private key signs fresh tokens after the rotation.
    const forgedPartner = await signWith(old, partnerClaims(f.partner, now));
    expect(await kyc(f.userId, forgedPartner)).to.deep.equal({ status: 401, error: "invalid_token" });
    const forgedAgent = await signWith(old, agentClaimsAt(f.agentToken, now));
    expect(await balance(forgedAgent)).to.equal("refused");
    await expectRefused(verifyAgent(forgedAgent), Reason.INVALID_TOKEN);

    // The same claims signed by the new key pass: the refusal is the key rule, nothing else.
    const sign = (claims: JWTPayload) => stack.core.keyring.signJwt(AGENT_TOKEN_HEADER, claims as Record<string, unknown>);
    expect((await kyc(f.userId, sign(partnerClaims(f.partner, now)))).status).to.equal(200);
    const resigned = sign(agentClaimsAt(f.agentToken, now));
    // The header segment is kept per kid: the first token after the rotation names the new one.
    expect(decodeProtectedHeader(resigned).kid).to.equal(rotated.kid);
    expect(await balance(resigned)).to.equal("authenticated");
    expect((await verifyAgent(resigned)).grant).to.not.equal(undefined);

    // Tokens the old key signed before the rotation keep working until they expire.
    expect((await kyc(f.userId, f.partnerToken)).status).to.equal(200);
    expect(await balance(f.agentToken)).to.equal("authenticated");
    expect((await verifyAgent(f.agentToken)).grant).to.not.equal(undefined);
    // New tokens carry the new kid.
    expect(decodeProtectedHeader(await mintPartnerToken(stack, f.partner)).kid).to.equal(rotated.kid);
  });

  it("keeps the rotated key in the JWKS for the longest token lifetime plus skew, then drops it", async () => {
    const f = await fixtures();
    const old = currentKey();
    const rotated = await stack.admin.grants.rotateSigningKey({});
    expect(await jwksKids()).to.include.members([old.kid, rotated.kid]);

    stack.clock.advance((3600 + 30) * 1000);
    expect(await jwksKids()).to.include.members([old.kid, rotated.kid]);
    const rpc = JSON.parse((await stack.clients.grants.getJwks({})).jwksJson) as { keys: { kid: string }[] };
    expect(rpc.keys.map((k) => k.kid)).to.include(old.kid);

    stack.clock.advance(1_000);
    const kids = await jwksKids();
    expect(kids).to.include(rotated.kid);
    expect(kids).to.not.include(old.kid);
    // And it verifies nothing any more, whatever the token claims.
    expect((await kyc(f.userId, f.partnerToken)).status).to.equal(401);
    const backdated = await signWith(old, partnerClaims(f.partner, nowSeconds() - 3700));
    expect((await kyc(f.userId, backdated)).status).to.equal(401);
  });

  it("retire withdraws a key at once: gone from the JWKS and every token it signed is refused, cached ones too", async () => {
    const f = await fixtures();
    const old = currentKey();
    expect((await kyc(f.userId, f.partnerToken)).status).to.equal(200);
    expect(await balance(f.agentToken)).to.equal("authenticated");
    await stack.admin.grants.rotateSigningKey({});
    stack.clock.advance(1_000);
    // Rotation does not stop a leaked key from backdating tokens; retirement does.
    const backdated = await signWith(old, partnerClaims(f.partner, nowSeconds() - 60));
    expect((await kyc(f.userId, backdated)).status).to.equal(200);

    const retired = await stack.admin.grants.retireSigningKey({ kid: old.kid });
    expect(retired.kid).to.equal(old.kid);
    expect(retired.publishedKids).to.not.include(old.kid);
    expect(await jwksKids()).to.not.include(old.kid);
    expect(await kyc(f.userId, f.partnerToken)).to.deep.equal({ status: 401, error: "invalid_token" });
    expect(await kyc(f.userId, backdated)).to.deep.equal({ status: 401, error: "invalid_token" });
    expect(await balance(f.agentToken)).to.equal("refused");
    await expectRefused(verifyAgent(f.agentToken), Reason.INVALID_TOKEN);
    // Tokens of the new key are untouched.
    expect((await kyc(f.userId, await mintPartnerToken(stack, f.partner))).status).to.equal(200);

    // Retiring again is harmless; the change is audited as the operator's.
    await stack.admin.grants.retireSigningKey({ kid: old.kid });
    const { records } = await stack.admin.audit.listRecords({ action: "keys.retire", limit: 500 });
    expect(records.filter((r) => r.subject === old.kid).map((r) => r.actor)).to.deep.equal(["admin", "admin"]);
  });

  it("refuses to retire the current key, an unknown or malformed kid, and callers without the operator credential", async () => {
    const f = await fixtures();
    const current = currentKey();
    const refused = await refusalOf(stack.admin.grants.retireSigningKey({ kid: current.kid }));
    expect(refused.reason).to.equal(Reason.INVALID_REQUEST);
    expect(refused.message).to.match(/current signing key; rotate first/);
    expect(await jwksKids()).to.include(current.kid);
    expect((await kyc(f.userId, f.partnerToken)).status).to.equal(200);

    await expectRefused(stack.admin.grants.retireSigningKey({ kid: "no-such-kid" }), Reason.NOT_FOUND);
    await expectRefused(stack.admin.grants.retireSigningKey({ kid: "" }), Reason.INVALID_REQUEST);
    await expectRefused(stack.admin.grants.retireSigningKey({ kid: "a".repeat(129) }), Reason.INVALID_REQUEST);
    await expectRefused(stack.admin.grants.retireSigningKey({ kid: "bad kid/../" }), Reason.INVALID_REQUEST);

    // Hostile: no operator credential (the gateway's own clients) may not withdraw a key.
    await stack.admin.grants.rotateSigningKey({});
    const denied = await refusalOf(stack.clients.grants.retireSigningKey({ kid: current.kid }));
    expect(denied.message).to.match(/operator credential required/);
    expect(await jwksKids()).to.include(current.kid);
  });

  it("concurrent rotations chain: every replaced key is marked rotated, only the current one is not", async () => {
    const first = currentKey().kid;
    const results = await Promise.all([1, 2, 3, 4].map(() => stack.admin.grants.rotateSigningKey({})));
    const kids = [first, ...results.map((r) => r.kid)];
    expect(new Set(kids).size).to.equal(5);
    const { rows } = await stack.core.db.raw(`SELECT kid FROM signing_keys WHERE kid = ANY(?) AND rotated_at IS NULL`, [kids]);
    expect((rows as { kid: string }[]).map((r) => r.kid)).to.deep.equal([currentKey().kid]);
  });

  it("with SIGNING_KEY, rotate refuses; a process configured with a retired key refuses to sign and reports not ready", async () => {
    const signingKey = JSON.stringify(newP256PrivateKey().export({ format: "jwk" }));
    const envStack = await startStack({ gateway: true, signingKey });
    let restarted: TestStack | undefined;
    try {
      const envKid = envStack.core.keyring.current()!.kid;
      const refused = await refusalOf(envStack.admin.grants.rotateSigningKey({}));
      expect(refused.reason).to.equal(Reason.INVALID_REQUEST);
      expect(refused.message).to.match(/SIGNING_KEY/);
      expect(refused.message).to.not.include(signingKey);
      expect(envStack.core.keyring.current()!.kid).to.equal(envKid);

      // The operator moved every process to a new key, then retires the old kid.
      await stack.admin.grants.retireSigningKey({ kid: envKid });
      restarted = await startStack({ gateway: true, signingKey });
      expect(restarted.core.keyring.current()).to.equal(undefined);
      expect((await fetch(`${restarted.url}/readyz`)).status).to.equal(503);
      const partner = await createPartner(restarted);
      const res = await postToken(restarted.url, "grant_type=client_credentials", { authorization: basic(partner.clientId, partner.clientSecret) });
      expect(res.status).to.equal(503);
      expect(await jwksKids(restarted)).to.not.include(envKid);
      expect(restarted.logs.text()).to.not.include(signingKey);
    } finally {
      await restarted?.close();
      await envStack.close();
    }
  });

  it("another replica on the same database follows a retirement within its short refresh period", async () => {
    const replica = await startStack({ gateway: true });
    try {
      const f = await fixtures();
      const old = currentKey();
      // The replica verifies (and caches) a token of this replica's key.
      expect((await kyc(f.userId, f.partnerToken, replica)).status).to.equal(200);
      expect(await jwksKids(replica)).to.include(old.kid);
      await stack.admin.grants.rotateSigningKey({});
      await stack.admin.grants.retireSigningKey({ kid: old.kid });
      // Here at once; there after at most about a second (key states are cached that long).
      expect((await kyc(f.userId, f.partnerToken)).status).to.equal(401);
      const deadline = Date.now() + 15_000;
      let status = 200;
      while (status === 200 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
        status = (await kyc(f.userId, f.partnerToken, replica)).status;
      }
      expect(status).to.equal(401);
      expect(await jwksKids(replica)).to.not.include(old.kid);
    } finally {
      await replica.close();
    }
  });
});
