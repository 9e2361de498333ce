import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { oauthGrant } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { heldTransaction } from "../../support/db-holds.js";
import { lockWaits } from "../../support/lock-waits.js";
import { postRpc } from "../../support/mcp.js";
import { expectOAuthError } from "../../support/refusals.js";
import { expectAccessDead, expectRefreshDead, lineageStates, refreshHttp, revokeHttp } from "../../support/token-races.js";

/**
 * A reused refresh token revokes its lineage. The grant it names sits in the middle of that
 * lineage, so the revocation must not lock the rows below it while holding it: a revocation
 * of the same lineage running at that moment locks them in id order, and the two would deadlock.
 */
describe("agent OAuth: reuse detection beside other revocations of its lineage (PostgreSQL only)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the revocations wait on rows another session holds");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  /** A lineage of three grants (two refreshes), its first row held by a transaction of the test until `release`. */
  async function heldLineage() {
    const g = await oauthGrant(stack);
    const t0 = g.token.body as Record<string, string>;
    const t1 = (await refreshHttp(stack, g.client, t0.refresh_token!)).body as Record<string, string>;
    const t2 = (await refreshHttp(stack, g.client, t1.refresh_token!)).body as Record<string, string>;
    expect(await lineageStates(stack, t2.jti!)).to.deep.equal(["superseded", "superseded", "active"]);
    // Past the grace window: a used token presented again is a reuse.
    stack.clock.advance(60_000);
    const held = await heldTransaction(stack.core.db, (t) => t.raw("SELECT id FROM grants WHERE id = ? FOR UPDATE", [t0.jti]));
    return { ...g, t0, t1, t2, release: () => held.release() };
  }

  async function expectLineageDead(l: Awaited<ReturnType<typeof heldLineage>>) {
    expect(await lineageStates(stack, l.t2.jti!)).to.deep.equal(["revoked", "revoked", "revoked"]);
    for (const t of [l.t0, l.t1, l.t2]) await expectAccessDead(stack, t.access_token!);
    await expectRefreshDead(stack, l.client, l.t2.refresh_token!);
  }

  it("a client's revocation waiting on the lineage's first grant, then a reuse of the middle grant's token: both answer, the lineage is revoked", async () => {
    const l = await heldLineage();
    const revoke = revokeHttp(stack, l.client, l.t2.access_token!);
    await lockWaits(stack.core.db, "grants", 1);
    const reuse = refreshHttp(stack, l.client, l.t1.refresh_token!);
    await lockWaits(stack.core.db, "grants", 2);
    await l.release();
    expect((await revoke).status).to.equal(200);
    expect((await reuse).body.error).to.equal("invalid_grant");
    await expectLineageDead(l);
  });

  it("two reuses of one lineage, the first grant's token waiting before the middle one's: both answer invalid_grant", async () => {
    const l = await heldLineage();
    const first = refreshHttp(stack, l.client, l.t0.refresh_token!);
    await lockWaits(stack.core.db, "grants", 1);
    const middle = refreshHttp(stack, l.client, l.t1.refresh_token!);
    await lockWaits(stack.core.db, "grants", 2);
    await l.release();
    expect([(await first).body.error, (await middle).body.error]).to.deep.equal(["invalid_grant", "invalid_grant"]);
    await expectLineageDead(l);
  });

  it("the user's kill switch waiting on the lineage's first grant, then a reuse of the middle grant's token: both answer", async () => {
    const l = await heldLineage();
    const operator = await stack.admin.grants.issueGrant({ userId: l.user.userId, vaultId: l.user.vaultId, scopes: ["accounts:read"] });
    const kill = postRpc(
      `${stack.url}/mcp/treasury`,
      { jsonrpc: "2.0", id: 1, method: "killSwitch.all", params: { reason: "race" } },
      { authorization: `Bearer ${operator.token!.accessToken}` },
    );
    await lockWaits(stack.core.db, "grants", 1);
    const reuse = refreshHttp(stack, l.client, l.t1.refresh_token!);
    await lockWaits(stack.core.db, "grants", 2);
    await l.release();
    const killed = await kill;
    expect(killed.status, killed.text).to.equal(200);
    expect(killed.json!.result.revoked).to.be.at.least(3);
    expect((await reuse).body.error).to.equal("invalid_grant");
    await expectLineageDead(l);
  });

  it("hostile: another client presenting the middle token while the owner's revocation waits is refused at once and revokes nothing", async () => {
    const l = await heldLineage();
    const other = await oauthGrant(stack);
    const revoke = revokeHttp(stack, l.client, l.t0.access_token!);
    await lockWaits(stack.core.db, "grants", 1);
    // The token is not this client's: refused without waiting for the lineage's rows.
    await expectOAuthError(
      await fetch(`${stack.url}/oauth2/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          grant_type: "refresh_token",
          refresh_token: l.t1.refresh_token!,
          client_id: other.client.client_id,
          client_secret: other.client.client_secret,
        }).toString(),
      }),
      400,
      "invalid_grant",
    );
    await l.release();
    expect((await revoke).status).to.equal(200);
    await expectLineageDead(l);
  });
});
