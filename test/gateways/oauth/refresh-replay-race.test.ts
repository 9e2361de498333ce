import { expect } from "chai";
import { decodeJwt } from "jose";
import { startStack, type TestStack } from "../../support/stack.js";
import { oauthGrant } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import {
  expectAccessDead,
  expectAccessLive,
  expectRefreshDead,
  lineageStates,
  refreshHttp,
  refreshVia,
  type RefreshOutcome,
} from "../../support/token-races.js";

type Issued = Extract<RefreshOutcome, { ok: true }>;

/**
 * Refresh tokens rotate (docs/reference/agent-oauth.md, "Refresh"): concurrent presentations of
 * one token within the grace window all get its one successor; after the window, or once the
 * successor was used, a presentation is a reuse that revokes the lineage.
 */
describe("agent OAuth: concurrent presentations of one refresh token (PostgreSQL only)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the refreshes race on connections of their own");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const burst = (client: { client_id: string; client_secret: string }, token: string, n: number) =>
    Promise.all(Array.from({ length: n }, (_, i) => refreshVia(stack, i % 3 === 2 ? "tool" : "http", client, token)));
  const reuseAudits = async (jti: string) =>
    (
      await stack.core.db.raw(
        `SELECT count(*)::int AS n FROM audit_records WHERE action = 'agent.grant.refresh_reuse' AND subject = (SELECT lineage_id::text FROM grants WHERE id = ?)`,
        [jti],
      )
    ).rows[0].n as number;

  it("many at once within the window: every one answers the one successor, which alone is active and refreshes on", async () => {
    const { token, client } = await oauthGrant(stack);
    const outcomes = await burst(client, token.body.refresh_token as string, 24);
    expect(outcomes.every((o) => o.ok)).to.equal(true);
    const issued = outcomes as Issued[];
    expect(new Set(issued.map((o) => o.jti)).size).to.equal(1);
    expect(new Set(issued.map((o) => o.refresh_token)).size).to.equal(1);
    // Re-signed with identical claims.
    expect(new Set(issued.map((o) => JSON.stringify(decodeJwt(o.access_token)))).size).to.equal(1);
    expect(await lineageStates(stack, issued[0]!.jti)).to.deep.equal(["superseded", "active"]);
    for (const o of issued.slice(0, 3)) await expectAccessLive(stack, o.access_token);
    const next = await refreshHttp(stack, client, issued[0]!.refresh_token);
    expect(next.status).to.equal(200);
    expect(await reuseAudits(issued[0]!.jti)).to.equal(0);
  });

  it("many at once after the window: every one is invalid_grant, each is audited as a reuse, and the whole lineage is revoked", async () => {
    const { token, client } = await oauthGrant(stack);
    const first = token.body.refresh_token as string;
    const r1 = await refreshHttp(stack, client, first);
    expect(r1.status).to.equal(200);
    stack.clock.advance(31_000);
    const outcomes = await burst(client, first, 16);
    expect(outcomes.map((o) => (o.ok ? "ok" : o.error))).to.deep.equal(new Array(16).fill("invalid_grant"));
    expect(await lineageStates(stack, r1.body.jti as string)).to.deep.equal(["revoked", "revoked"]);
    expect(await reuseAudits(r1.body.jti as string)).to.equal(16);
    await expectAccessDead(stack, r1.body.access_token as string);
    await expectRefreshDead(stack, client, r1.body.refresh_token as string);
  });

  it("replays inside the window racing the successor's own refresh: an invalid_grant replay always leaves the lineage revoked", async function () {
    this.timeout(120_000);
    for (let round = 0; round < 8; round++) {
      const { token, client } = await oauthGrant(stack);
      const first = token.body.refresh_token as string;
      const r1 = (await refreshVia(stack, "http", client, first)) as Issued;
      const replays = Array.from({ length: 6 }, (_, i) => refreshVia(stack, i % 2 ? "tool" : "http", client, first));
      replays.splice(round % 7, 0, refreshVia(stack, "http", client, r1.refresh_token));
      const outcomes = await Promise.all(replays);
      const onward = outcomes.splice(round % 7, 1)[0]!;
      for (const o of outcomes) expect(o.ok ? o.jti : o.error).to.be.oneOf([r1.jti, "invalid_grant"]);
      const reused = outcomes.some((o) => !o.ok);
      if (reused) {
        expect(await lineageStates(stack, r1.jti)).to.not.include("active");
        for (const t of [r1, ...(onward.ok ? [onward] : [])]) await expectAccessDead(stack, t.access_token);
        if (onward.ok) await expectRefreshDead(stack, client, onward.refresh_token);
      } else {
        // Every replay came before the successor was used: the lineage lives on in the onward refresh.
        expect(onward.ok).to.equal(true);
        await expectAccessLive(stack, (onward as Issued).access_token);
        expect(await lineageStates(stack, r1.jti)).to.deep.equal(["superseded", "superseded", "active"]);
      }
    }
  });

  it("hostile: another client's secret, a wrong secret and another grant's token in the burst are refused and revoke nothing", async () => {
    const victim = await oauthGrant(stack);
    const other = await oauthGrant(stack);
    const token = victim.token.body.refresh_token as string;
    const wrongSecret = { client_id: victim.client.client_id, client_secret: other.client.client_secret };
    const [own, ...hostile] = await Promise.all([
      burst(victim.client, token, 12),
      refreshVia(stack, "http", other.client, token),
      refreshVia(stack, "tool", other.client, token),
      refreshVia(stack, "http", wrongSecret, token),
      refreshVia(stack, "tool", wrongSecret, token),
      // The victim's client presenting the other client's token.
      refreshVia(stack, "http", victim.client, other.token.body.refresh_token as string),
    ]);
    expect(hostile.map((o) => (o.ok ? "ok" : o.error))).to.deep.equal(["invalid_grant", "invalid_grant", "invalid_client", "invalid_client", "invalid_grant"]);
    expect(new Set(own.map((o) => (o.ok ? o.jti : o.error))).size).to.equal(1);
    const successor = own[0] as Issued;
    await expectAccessLive(stack, successor.access_token);
    expect(await lineageStates(stack, successor.jti)).to.deep.equal(["superseded", "active"]);
    // The other lineage was neither used up nor revoked.
    await expectAccessLive(stack, other.token.body.access_token as string);
    expect((await refreshHttp(stack, other.client, other.token.body.refresh_token as string)).status).to.equal(200);
    expect(await reuseAudits(successor.jti)).to.equal(0);
  });
});
