import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { decodeJwt, decodeProtectedHeader, SignJWT } from "jose";
import { newP256PrivateKey } from "../../../lib/crypto.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { postRpc } from "../../support/mcp.js";

/**
 * A replica learns of a key another replica rotated in when a token first names it. A token
 * signed with that key is good from the moment it is handed out, on every replica: one that
 * reread its key states a moment before, and may not reread again yet, waits for the next reread.
 */
describe("signing keys: a token of a key another replica just rotated in", function () {
  this.timeout(60_000);
  let rotating: TestStack;
  let other: TestStack;
  before(async () => {
    rotating = await startStack({ gateway: true });
    // Rereads of key states come only from tokens naming an unseen kid, at most one every 1.5 s.
    other = await startStack({ gateway: true, keyStateTtlMs: 600_000, unknownKidRereadMs: 1_500 });
  });
  after(async () => {
    await other?.close();
    await rotating?.close();
  });

  const kyc = (s: TestStack, userId: string, token: string) =>
    fetch(`${s.url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${token}` } });
  const balance = (s: TestStack, token: string) =>
    postRpc(`${s.url}/mcp/read`, { jsonrpc: "2.0", id: 1, method: "accounts.balance", params: {} }, { authorization: `Bearer ${token}` });

  it("is accepted at once by the other replica, for partner and agent tokens alike, however many arrive together", async () => {
    const partner = await createPartner(rotating);
    const { userId } = await createUserFor(rotating, partner);
    const before = await mintPartnerToken(rotating, partner);
    // The other replica reads its key states now, for this token.
    expect((await kyc(other, userId, before)).status).to.equal(200);

    const { kid } = await rotating.admin.grants.rotateSigningKey({});
    const partnerToken = await mintPartnerToken(rotating, partner);
    const owner = await rotating.admin.partners.createUser({ email: `owner-${randomUUID()}@example.com` });
    const agentToken = (await rotating.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] })).token!.accessToken;
    expect([decodeProtectedHeader(partnerToken).kid, decodeProtectedHeader(agentToken).kid]).to.deep.equal([kid, kid]);

    const [kycs, balances] = await Promise.all([
      Promise.all(Array.from({ length: 8 }, () => kyc(other, userId, partnerToken))),
      Promise.all(Array.from({ length: 8 }, () => balance(other, agentToken))),
    ]);
    expect(kycs.map((r) => r.status)).to.deep.equal(new Array(8).fill(200));
    expect(balances.map((r) => r.json!.result?.vault_id)).to.deep.equal(new Array(8).fill(owner.vaultId));
    const jwks = await fetch(`${other.url}/.well-known/agent-jwks.json`);
    expect(((await jwks.json()) as { keys: { kid: string }[] }).keys.map((k) => k.kid)).to.include(kid);
  });

  it("hostile: a token naming a kid no replica published is refused with 401 after the reread, and the real ones still pass", async () => {
    const partner = await createPartner(rotating);
    const { userId } = await createUserFor(rotating, partner);
    const real = await mintPartnerToken(rotating, partner);
    expect((await kyc(other, userId, real)).status).to.equal(200);
    const iat = decodeJwt(real).iat!;
    const forged = await new SignJWT({ ...decodeJwt(real), jti: randomUUID(), iat, nbf: iat, exp: iat + 3600 })
      .setProtectedHeader({ alg: "ES256", typ: "at+jwt", kid: `k-${randomUUID()}` })
      .sign(newP256PrivateKey());
    const answers = await Promise.all([...Array.from({ length: 6 }, () => kyc(other, userId, forged)), kyc(other, userId, real)]);
    expect(answers.map((r) => r.status)).to.deep.equal([401, 401, 401, 401, 401, 401, 200]);
    expect(((await answers[0]!.json()) as { error: { code: string } }).error.code).to.equal("invalid_token");
  });
});
