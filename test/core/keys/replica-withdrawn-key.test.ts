import { expect } from "chai";
import { decodeProtectedHeader } from "jose";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner, mintPartnerToken, postToken, type TestPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { codeExchangeForm, consentCode, createJar, createUser, oauthGrant, signIn, verifyReason } from "../../support/agent-oauth.js";
import { expectOAuthError, expectRefused, reasonOf, refusalOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import { until } from "../../support/until.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * Replica B retires (or rotates out) the key replica A signs with. A never hands out a token that
 * every verifier refuses: its check before signing rereads key states once they are due, then it
 * stops signing (503) and reports not ready, until the operator rotates on A.
 */
describe("signing keys: a replica whose current key another replica withdrew", function () {
  this.timeout(120_000);
  let a: TestStack;
  let b: TestStack;
  beforeEach(async () => {
    // A rereads key states whenever it is asked (in service, once they are a second old), so its check before signing sees the change.
    a = await startStack({ gateway: true, keyStateTtlMs: 0 });
    b = await startStack({ gateway: true });
  });
  afterEach(async () => {
    await a?.close();
    await b?.close();
  });

  const kyc = (s: TestStack, userId: string, token: string) =>
    fetch(`${s.url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${token}` } });
  const mint = (s: TestStack, p: TestPartner) => postToken(s.url, "grant_type=client_credentials", { authorization: basic(p.clientId, p.clientSecret) });
  const oauthToken = (s: TestStack, form: Record<string, string>) =>
    fetch(`${s.url}/oauth2/token`, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(form) });
  const issueAgentToken = async (s: TestStack) => {
    const owner = await s.admin.partners.createUser({ email: `owner-${crypto.randomUUID()}@example.com` });
    return s.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] });
  };

  it("answers 503 without Retry-After on both token endpoints, reports not ready, and signs again after a rotation on it", async () => {
    const partner = await createPartner(a);
    const { userId } = await createUserFor(a, partner);
    const agent = await oauthGrant(a);
    const kidA = a.core.keyring.current()!.kid;
    expect((await kyc(b, userId, await mintPartnerToken(a, partner))).status).to.equal(200);
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(200);

    await b.admin.grants.retireSigningKey({ kid: kidA });

    const partnerAnswer = await mint(a, partner);
    await expectOAuthError(partnerAnswer, 503, "temporarily_unavailable");
    expect(partnerAnswer.headers.get("retry-after")).to.equal(null);
    const refreshed = await fetch(`${a.url}/oauth2/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        grant_type: "refresh_token",
        refresh_token: agent.token.body.refresh_token as string,
        client_id: agent.client.client_id,
        client_secret: agent.client.client_secret,
      }),
    });
    expect(refreshed.headers.get("retry-after")).to.equal(null);
    await expectOAuthError(refreshed, 503, "temporarily_unavailable");
    await expectRefused(issueAgentToken(a), Reason.SIGNING_UNAVAILABLE);
    const ready = await fetch(`${a.url}/readyz`);
    expect(ready.status).to.equal(503);
    expect(((await ready.json()) as { failing: string[] }).failing).to.include("signing_key");
    expect(a.logs.text()).to.include(`key ${kidA} has been retired`);
    // A partner with a token from B is still served by A: only A's signing stopped.
    expect((await kyc(a, userId, await mintPartnerToken(b, partner))).status).to.equal(200);

    // The operator's fix: rotate on A. Its new tokens pass on both replicas.
    const { kid } = await a.admin.grants.rotateSigningKey({});
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(200);
    const token = await mintPartnerToken(a, partner);
    expect(decodeProtectedHeader(token).kid).to.equal(kid);
    expect([(await kyc(a, userId, token)).status, (await kyc(b, userId, token)).status]).to.deep.equal([200, 200]);
    const agentToken = (await issueAgentToken(a)).token!.accessToken;
    expect([await verifyReason(a, agentToken), await verifyReason(b, agentToken)]).to.deep.equal(["ok", "ok"]);
  });

  it("spends no authorization code or refresh token on its 503: both work once A is rotated", async () => {
    const user = await createUser(a);
    const code = await consentCode(a, user, createJar(a.url));
    const agent = await oauthGrant(a);
    const refreshForm = {
      grant_type: "refresh_token",
      refresh_token: agent.token.body.refresh_token as string,
      client_id: agent.client.client_id,
      client_secret: agent.client.client_secret,
    };
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });
    await expectOAuthError(await oauthToken(a, codeExchangeForm(code)), 503, "temporarily_unavailable");
    await expectOAuthError(await oauthToken(a, refreshForm), 503, "temporarily_unavailable");

    const { kid } = await a.admin.grants.rotateSigningKey({});
    for (const form of [codeExchangeForm(code), refreshForm]) {
      const res = await oauthToken(a, form);
      expect(res.status, await res.clone().text()).to.equal(200);
      const token = ((await res.json()) as { access_token: string }).access_token;
      expect(decodeProtectedHeader(token).kid).to.equal(kid);
      expect(await verifyReason(b, token)).to.equal("ok");
    }
  });

  it("leaves nothing half-done on its 503: an operator's grant is not created, an agent's grant is not superseded", async () => {
    const owner = await createUser(a);
    const jar = createJar(a.url);
    await signIn(a, jar, owner.email);
    const sessionToken = jar.cookies.get("vg_session")!;
    // Signed by B's key, which A verifies: only A's signing is broken.
    const held = (await b.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] })).token!;
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });

    await expectRefused(a.clients.grants.supersedeGrant({ accessToken: held.accessToken, scope: "" }), Reason.SIGNING_UNAVAILABLE);
    await expectRefused(a.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] }), Reason.SIGNING_UNAVAILABLE);
    expect(await verifyReason(b, held.accessToken)).to.equal("ok");
    // Only A's signing stopped: it still verifies the honest agent's token, as B does.
    expect(await verifyReason(a, held.accessToken)).to.equal("ok");
    const { agents } = await a.clients.grants.listAgents({ sessionToken });
    expect(agents.map((x) => [x.activeGrants, x.grants.map((g) => g.grantId)])).to.deep.equal([[1, [held.jti]]]);
  });

  it("notices on its own reread too: /readyz of a replica with the usual reread period goes not ready without any mint", async () => {
    const c = await startStack({ gateway: true, keyStateTtlMs: 50 });
    try {
      expect((await fetch(`${c.url}/readyz`)).status).to.equal(200);
      await b.admin.grants.retireSigningKey({ kid: c.core.keyring.current()!.kid });
      await until("the replica reports not ready", async () => (await fetch(`${c.url}/readyz`)).status === 503);
    } finally {
      await c.close();
    }
  });

  it("a key rotated out elsewhere (a process sharing its key file) stops A signing, rather than minting tokens refused for their iat", async () => {
    const partner = await createPartner(a);
    const kidA = a.core.keyring.current()!.kid;
    // What `keys rotate` on a process holding the same key file writes (key files need their own database here).
    await b.core.db.raw(`UPDATE signing_keys SET rotated_at = ? WHERE kid = ?`, [new Date(), kidA]);
    await expectOAuthError(await mint(a, partner), 503, "temporarily_unavailable");
    expect(a.logs.text()).to.include(`key ${kidA} has been rotated out`);
  });

  it("hostile: a caller without the operator credential cannot rotate A back into signing", async () => {
    const partner = await createPartner(a);
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });
    await expectOAuthError(await mint(a, partner), 503, "temporarily_unavailable");
    const refused = await refusalOf(a.clients.grants.rotateSigningKey({}));
    expect(refused.reason).to.not.equal(undefined);
    expect(a.core.keyring.current()).to.equal(undefined);
    await expectOAuthError(await mint(a, partner), 503, "temporarily_unavailable");
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(503);
  });

  it("PostgreSQL only: many concurrent mints on A right after B retires its key: none is a 200 with a dead token", async function () {
    requirePostgres(this, "concurrent token issuance on two replicas of one PostgreSQL database");
    const partner = await createPartner(a);
    const { userId } = await createUserFor(a, partner);
    // Both mint paths are warm: A has verified and signed with its key already.
    expect((await kyc(a, userId, await mintPartnerToken(a, partner))).status).to.equal(200);
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });
    // A notices at its next reread of key states, which readiness begins.
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(503);

    const [partnerAnswers, agentAnswers] = await Promise.all([
      Promise.all(Array.from({ length: 24 }, () => mint(a, partner))),
      Promise.all(Array.from({ length: 24 }, () => issueAgentToken(a).then(() => "ok", reasonOf))),
    ]);
    expect(partnerAnswers.map((r) => r.status)).to.deep.equal(new Array(24).fill(503));
    // No Retry-After: the refusal for the key, not a database outage (pool waits) answered alike.
    expect(partnerAnswers.map((r) => r.headers.get("retry-after"))).to.deep.equal(new Array(24).fill(null));
    expect(agentAnswers).to.deep.equal(new Array(24).fill(Reason.SIGNING_UNAVAILABLE));
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(503);
  });

  it("PostgreSQL only: concurrent supersedes and operator grants on A after B retires its key leave the held grant alone", async function () {
    requirePostgres(this, "concurrent grant changes on two replicas of one PostgreSQL database");
    const owner = await createUser(a);
    const jar = createJar(a.url);
    await signIn(a, jar, owner.email);
    const held = (await b.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] })).token!;
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(503);
    const answers = await Promise.all([
      ...Array.from({ length: 12 }, () => a.clients.grants.supersedeGrant({ accessToken: held.accessToken, scope: "" }).then(() => "ok", reasonOf)),
      ...Array.from({ length: 12 }, () =>
        a.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] }).then(() => "ok", reasonOf),
      ),
    ]);
    expect(answers).to.deep.equal(new Array(24).fill(Reason.SIGNING_UNAVAILABLE));
    expect([await verifyReason(a, held.accessToken), await verifyReason(b, held.accessToken)]).to.deep.equal(["ok", "ok"]);
    const { agents } = await a.clients.grants.listAgents({ sessionToken: jar.cookies.get("vg_session")! });
    expect(agents.map((x) => [x.activeGrants, x.grants.map((g) => g.grantId)])).to.deep.equal([[1, [held.jti]]]);
  });

  it("PostgreSQL only: mints racing the retirement: every 200 is from before it, and none after it is a 200", async function () {
    requirePostgres(this, "token issuance racing a retirement on two replicas of one PostgreSQL database");
    // Several partners, so no client meets the per-client limits of the token endpoint.
    const partners = await Promise.all(Array.from({ length: 10 }, () => createPartner(a)));
    const { userId } = await createUserFor(a, partners[0]);
    const kyc0 = (s: TestStack, token: string) => kyc(s, userId, token);
    const kidA = a.core.keyring.current()!.kid;
    const mints = partners.flatMap((p) => [mint(a, p), mint(a, p)]);
    await b.admin.grants.retireSigningKey({ kid: kidA });
    // Mints sharing a reread begun before the retirement may still sign: "after" is after A's next one.
    expect((await fetch(`${a.url}/readyz`)).status).to.equal(503);
    const after = await Promise.all(partners.map((p) => mint(a, p)));
    const during = await Promise.all(mints);
    expect(after.map((r) => r.status)).to.deep.equal(new Array(10).fill(503));
    expect(during.every((r) => r.status === 200 || r.status === 503)).to.equal(true);
    // A 200 of the race is a token its key signed before the retirement, which withdraws it with the rest.
    for (const r of during.filter((x) => x.status === 200)) {
      const token = ((await r.json()) as { access_token: string }).access_token;
      expect(decodeProtectedHeader(token).kid).to.equal(kidA);
    }
    const { kid } = await a.admin.grants.rotateSigningKey({});
    const tokens = await Promise.all(partners.slice(0, 1).flatMap((p) => Array.from({ length: 10 }, () => mintPartnerToken(a, p))));
    const statuses = await Promise.all(tokens.flatMap((t) => [kyc0(a, t), kyc0(b, t)]));
    expect(statuses.map((r) => r.status)).to.deep.equal(new Array(20).fill(200));
    expect(new Set(tokens.map((t) => decodeProtectedHeader(t).kid))).to.deep.equal(new Set([kid]));
  });
});
