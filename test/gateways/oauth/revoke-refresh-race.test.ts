import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { oauthGrant } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { postRpc } from "../../support/mcp.js";
import { expectOAuthError } from "../../support/refusals.js";
import {
  expectAccessDead,
  expectAccessLive,
  expectRefreshDead,
  lineageStates,
  refreshHttp,
  refreshVia,
  revokeHttp,
  type Creds,
  type RefreshOutcome,
} from "../../support/token-races.js";

type Issued = Extract<RefreshOutcome, { ok: true }>;

/**
 * A client revokes its lineage with an access token past its hour while refreshes of the same
 * grant (token endpoint and MCP tool, chained on what they get back) are in flight: once the
 * revoke has answered, no token the lineage ever handed out works anywhere.
 */
describe("agent OAuth: a revocation with an expired access token racing refreshes of its grant (PostgreSQL only)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the refreshes and the revocation race on connections of their own");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  /** A lineage whose first access token has expired, refreshed once since (so the expired token names a superseded grant). */
  async function expiredLineage() {
    const g = await oauthGrant(stack);
    expect(g.token.status).to.equal(200);
    stack.clock.advance(3700_000);
    const r1 = await refreshHttp(stack, g.client, g.token.body.refresh_token as string);
    expect(r1.status).to.equal(200);
    return { ...g, expired: g.token.body.access_token as string, first: g.token.body.refresh_token as string, r1: r1.body as unknown as Issued };
  }

  /** Refreshes `token`, then whatever it got back, `depth` times, alternating surfaces; every answer is recorded. */
  async function chain(client: Creds, token: string, depth: number, i: number, answers: RefreshOutcome[]): Promise<void> {
    let next = token;
    for (let d = 0; d < depth; d++) {
      const out = await refreshVia(stack, (i + d) % 2 === 0 ? "http" : "tool", client, next);
      answers.push(out);
      if (!out.ok) return;
      next = out.refresh_token;
    }
  }

  it("many chained refreshes in flight with the revoke: afterwards no access or refresh token of the lineage works, on any surface", async function () {
    this.timeout(120_000);
    for (let round = 0; round < 5; round++) {
      const l = await expiredLineage();
      const answers: RefreshOutcome[] = [];
      const refreshes = Array.from({ length: 12 }, (_, i) => chain(l.client, l.r1.refresh_token, 3, i + round, answers));
      // The revoke starts among the refreshes; whatever had answered by the time it answered must be dead then already.
      const revoked = revokeHttp(stack, l.client, l.expired).then(async (res) => {
        expect(res.status).to.equal(200);
        return answers.filter((a): a is Issued => a.ok);
      });
      const [before] = await Promise.all([revoked, ...refreshes]);
      for (const t of before) await expectAccessDead(stack, t.access_token);
      for (const a of answers) if (!a.ok) expect(a.error).to.equal("invalid_grant");

      const issued = [l.r1, ...answers.filter((a): a is Issued => a.ok)];
      for (const t of new Set(issued.map((x) => x.access_token))) await expectAccessDead(stack, t);
      for (const t of new Set([l.first, ...issued.map((x) => x.refresh_token)])) await expectRefreshDead(stack, l.client, t);
      expect(await lineageStates(stack, l.r1.jti)).to.not.include("active");
    }
  });

  it("a burst of refreshes of one refresh token with the revoke inside it mints nothing that outlives the revoke", async function () {
    this.timeout(120_000);
    for (let round = 0; round < 5; round++) {
      const l = await expiredLineage();
      const calls: Promise<RefreshOutcome | Response>[] = Array.from({ length: 16 }, (_, i) =>
        refreshVia(stack, i % 2 ? "tool" : "http", l.client, l.r1.refresh_token),
      );
      calls.splice(round * 3, 0, revokeHttp(stack, l.client, l.expired));
      const settled = await Promise.all(calls);
      const outcomes = settled.filter((x): x is RefreshOutcome => !(x instanceof Response));
      expect((settled.find((x) => x instanceof Response) as Response).status).to.equal(200);
      const issued = outcomes.filter((a): a is Issued => a.ok);
      // Refreshes that won before the revoke all got the one successor (the grace rule); the rest invalid_grant.
      expect(new Set(issued.map((x) => x.jti)).size).to.be.at.most(1);
      for (const a of outcomes) if (!a.ok) expect(a.error).to.equal("invalid_grant");
      for (const t of new Set([l.r1, ...issued].map((x) => x.access_token))) await expectAccessDead(stack, t);
      for (const t of new Set([l.r1, ...issued].map((x) => x.refresh_token))) await expectRefreshDead(stack, l.client, t);
      expect(await lineageStates(stack, l.r1.jti)).to.not.include("active");
    }
  });

  it("agent.grant.issue calls and refreshes in flight with the revoke: nothing they mint outlives it", async function () {
    this.timeout(120_000);
    for (let round = 0; round < 4; round++) {
      const l = await expiredLineage();
      const issue = () =>
        postRpc(
          `${stack.url}/mcp/treasury`,
          { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "agent.grant.issue", arguments: {} } },
          { authorization: `Bearer ${l.r1.access_token}` },
        );
      const calls: Promise<Response | RefreshOutcome | Awaited<ReturnType<typeof issue>>>[] = [
        ...Array.from({ length: 6 }, () => issue()),
        ...Array.from({ length: 6 }, (_, i) => refreshVia(stack, i % 2 ? "tool" : "http", l.client, l.r1.refresh_token)),
      ];
      calls.splice(round * 3, 0, revokeHttp(stack, l.client, l.expired));
      const minted: Issued[] = [];
      for (const answer of await Promise.all(calls)) {
        if (answer instanceof Response) expect(answer.status).to.equal(200);
        else if ("ok" in answer) {
          if (answer.ok) minted.push(answer);
          else expect(answer.error).to.equal("invalid_grant");
        } else {
          // The issue tool: a token, or its bearer refused (superseded or revoked) with 401.
          expect(answer.status, answer.text).to.be.oneOf([200, 401]);
          if (answer.status === 200) minted.push({ ok: true, ...answer.json!.result.structuredContent });
        }
      }
      for (const t of [l.r1, ...minted]) {
        await expectAccessDead(stack, t.access_token);
        await expectRefreshDead(stack, l.client, t.refresh_token);
      }
      expect(await lineageStates(stack, l.r1.jti)).to.not.include("active");
    }
  });

  it("hostile: another client's revokes and refreshes in the same race revoke nothing of the victim's; its own lineage ends", async function () {
    this.timeout(120_000);
    const victim = await expiredLineage();
    const other = await oauthGrant(stack);
    const otherExpired = other.token.body.access_token as string;
    stack.clock.advance(3700_000);
    const wrongSecret = { client_id: victim.client.client_id, client_secret: other.client.client_secret };
    const hostile = [
      // The victim's expired token, another client's secret: refused as another client's token.
      revokeHttp(stack, other.client, victim.expired).then((r) => expectOAuthError(r, 400, "invalid_request")),
      revokeHttp(stack, other.client, victim.r1.access_token).then((r) => expectOAuthError(r, 400, "invalid_request")),
      revokeHttp(stack, other.client, victim.r1.refresh_token).then((r) => expectOAuthError(r, 400, "invalid_request")),
      // The victim's client id with another client's secret: no client at all.
      revokeHttp(stack, wrongSecret, victim.expired).then((r) => expectOAuthError(r, 401, "invalid_client")),
      refreshHttp(stack, other.client, victim.r1.refresh_token).then((r) => expect(r.body.error).to.equal("invalid_grant")),
      refreshHttp(stack, wrongSecret, victim.r1.refresh_token).then((r) => expect(r.body.error).to.equal("invalid_client")),
      // The other client's own expired token ends only its own lineage.
      revokeHttp(stack, other.client, otherExpired).then((r) => expect(r.status).to.equal(200)),
    ];
    const own = Array.from({ length: 8 }, (_, i) => refreshVia(stack, i % 2 ? "tool" : "http", victim.client, victim.r1.refresh_token));
    const [outcomes] = await Promise.all([Promise.all(own), ...hostile]);
    // Every refresh of the victim got its one successor, which works everywhere and refreshes on.
    const jtis = new Set(outcomes.map((o) => (o.ok ? o.jti : o.error)));
    expect([...jtis]).to.have.length(1);
    const successor = outcomes[0] as Issued;
    expect(successor.ok).to.equal(true);
    await expectAccessLive(stack, successor.access_token);
    expect((await refreshHttp(stack, victim.client, successor.refresh_token)).status).to.equal(200);
    await expectAccessDead(stack, otherExpired);
    await expectRefreshDead(stack, other.client, other.token.body.refresh_token as string);
  });
});
