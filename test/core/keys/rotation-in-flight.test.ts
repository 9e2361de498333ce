import { expect } from "chai";
import { decodeProtectedHeader } from "jose";
import { startStack, type TestStack } from "../../support/stack.js";
import { oauthGrant, postForm, verifyReason } from "../../support/agent-oauth.js";
import { basic, createPartner, mintPartnerToken } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { requirePostgres } from "../../support/db.js";
import { lockWaits } from "../../support/lock-waits.js";
import { heldTransaction } from "../../support/db-holds.js";

/** Tokens the rotating process signs while its rotation is being written stay good for their hour. */
describe("signing key rotation: tokens issued while it commits", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "holds the signing_keys rows while the rotation waits for them");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  /** Keeps every signing_keys row locked until `release`, so a rotation waits inside its write. */
  async function holdKeys() {
    const held = await heldTransaction(stack.core.db, (t) => t.raw("SELECT kid FROM signing_keys FOR UPDATE"));
    return () => held.release();
  }

  it("an agent refresh and a partner token issued a second after the rotation began both verify once it is done", async () => {
    const agent = await oauthGrant(stack);
    const partner = await createPartner(stack);
    const { userId } = await createUserFor(stack, partner);
    const oldKid = decodeProtectedHeader(agent.token.body.access_token as string).kid;

    const release = await holdKeys();
    const rotating = stack.admin.grants.rotateSigningKey({});
    await lockWaits(stack.core.db, "signing_keys");
    stack.clock.advance(2_000);
    const refreshed = await postForm(
      `${stack.url}/oauth2/token`,
      { grant_type: "refresh_token", refresh_token: agent.token.body.refresh_token as string },
      { authorization: basic(agent.client.client_id, agent.client.client_secret) },
    );
    expect(refreshed.status).to.equal(200);
    const partnerToken = await mintPartnerToken(stack, partner);
    await release();
    const rotated = await rotating;
    expect(rotated.kid).to.not.equal(oldKid);

    expect(await verifyReason(stack, refreshed.body.access_token as string)).to.equal("ok");
    const kyc = await fetch(`${stack.url}/api/partner/users/${userId}/kyc`, { headers: { authorization: `Bearer ${partnerToken}` } });
    expect(kyc.status).to.equal(200);
    // A token the old key signs after the rotation is still refused.
    stack.clock.advance(2_000);
    const next = await postForm(
      `${stack.url}/oauth2/token`,
      { grant_type: "refresh_token", refresh_token: refreshed.body.refresh_token as string },
      { authorization: basic(agent.client.client_id, agent.client.client_secret) },
    );
    expect(decodeProtectedHeader(next.body.access_token as string).kid).to.equal(rotated.kid);
  });
});
