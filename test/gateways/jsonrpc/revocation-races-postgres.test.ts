import { expect } from "chai";
import { requirePostgres } from "../../support/db.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createOwner, ownerSession } from "../../support/budgets.js";
import { pkce, postForm, REDIRECT, registerClient, vaultUrn } from "../../support/agent-oauth.js";
import { budgetUnderRoot } from "../../support/budget-life.js";

/**
 * Revocations racing agents that keep reissuing their grants: a grant issued from one the
 * revocation reached is revoked too, however the transactions interleave. PostgreSQL only:
 * PGlite runs one query at a time, so nothing interleaves there.
 */
describe("revocations racing reissues (PostgreSQL only: needs concurrent transactions)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the race needs concurrent transactions");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const call = (path: string, token: string, method: string, params: unknown = {}) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });

  /** Agents reissuing their grants back to back (agent.grant.issue), each keeping its newest token. */
  function reissuing(tokens: string[]) {
    const latest = [...tokens];
    let stop = false;
    let started!: () => void;
    const warm = new Promise<void>((resolve) => (started = resolve));
    const rounds = latest.map(() => 0);
    const runs = latest.map(async (_, i) => {
      while (!stop) {
        const res = await call("/mcp/treasury", latest[i]!, "agent.grant.issue");
        if (!res.json?.result) break;
        latest[i] = res.json.result.access_token as string;
        rounds[i]! += 1;
        if (rounds.every((n) => n >= 2)) started();
      }
      started();
    });
    const finish = () => {
      stop = true;
      return Promise.all(runs);
    };
    return { latest, warm, finish };
  }

  const activeGrants = async (column: "user_id" | "lineage_id" | "vault_id", ids: string[]) => {
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM grants WHERE ${column} = ANY(?::uuid[]) AND state = 'active'`, [ids]);
    return rows[0].n as number;
  };

  it("killSwitch.all racing eight agents' reissues leaves none of the user's grants active", async () => {
    for (let trial = 0; trial < 4; trial++) {
      const owner = await createOwner(stack);
      const issue = () => stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] });
      const agents = await Promise.all(Array.from({ length: 8 }, async () => (await issue()).token!.accessToken));
      const killer = (await issue()).token!.accessToken;
      const race = reissuing(agents);
      await race.warm;
      const killed = await call("/mcp/treasury", killer, "killSwitch.all", { reason: "race" });
      expect(killed.json!.result.revoked).to.be.greaterThan(8);
      await race.finish();
      expect(await activeGrants("user_id", [owner.userId])).to.equal(0);
      for (const token of race.latest) expect((await call("/mcp/read", token, "accounts.balance")).status).to.equal(401);
    }
  });

  it("RFC 7009 revocation racing the lineage's reissues leaves nothing of the lineage active", async () => {
    const client = (await registerClient(stack)).body;
    const lineages = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const owner = await createOwner(stack);
        const res = await stack.admin.grants.issueGrant({
          userId: owner.userId,
          vaultId: owner.vaultId,
          scopes: ["accounts:read"],
          clientId: client.client_id,
        });
        return res.token!;
      }),
    );
    const race = reissuing(lineages.map((t) => t.accessToken));
    await race.warm;
    const revoked = await Promise.all(
      race.latest.map((token) => postForm(`${stack.url}/oauth2/revoke`, { token, client_id: client.client_id, client_secret: client.client_secret })),
    );
    for (const res of revoked) expect(res.status).to.equal(200);
    await race.finish();
    expect(
      await activeGrants(
        "lineage_id",
        lineages.map((t) => t.jti),
      ),
    ).to.equal(0);
    for (const token of race.latest) expect((await call("/mcp/read", token, "accounts.balance")).status).to.equal(401);
  });

  it("agent.budget.revoke racing the budget's agents' reissues leaves none of its grants active", async () => {
    for (let trial = 0; trial < 3; trial++) {
      const life = await budgetUnderRoot(stack);
      const issue = () => stack.admin.grants.issueGrant({ userId: life.owner.userId, vaultId: life.child.vaultId, scopes: ["accounts:read"] });
      const race = reissuing(await Promise.all(Array.from({ length: 8 }, async () => (await issue()).token!.accessToken)));
      await race.warm;
      const closed = await call("/mcp/treasury", life.parentToken, "agent.budget.revoke", { vault_id: life.child.vaultId });
      expect(closed.json!.result.status).to.equal("closed");
      await race.finish();
      expect(await activeGrants("vault_id", [life.child.vaultId])).to.equal(0);
    }
  });

  /** A user's consents to one client over core's page RPC: approve() gives an unexchanged code, exchange() trades it over HTTP. */
  async function consenting() {
    const owner = await createOwner(stack);
    const client = (await registerClient(stack)).body;
    const sessionToken = await ownerSession(stack, owner.userId);
    const approve = async () => {
      const { verifier, challenge } = pkce();
      const request = {
        clientId: client.client_id,
        redirectUri: REDIRECT,
        scope: "accounts:read",
        resources: [vaultUrn(owner.vaultId)],
        codeChallenge: challenge,
        codeChallengeMethod: "S256",
      };
      return { code: (await stack.clients.grants.approveAuthorization({ request, sessionToken })).code, verifier };
    };
    const exchange = ({ code, verifier }: { code: string; verifier: string }) =>
      postForm(`${stack.url}/oauth2/token`, {
        grant_type: "authorization_code",
        code,
        redirect_uri: REDIRECT,
        code_verifier: verifier,
        client_id: client.client_id,
        client_secret: client.client_secret,
      });
    return { owner, sessionToken, approve, exchange };
  }

  it("killSwitch.all racing exchanges of codes the user approved leaves none of the user's grants active", async () => {
    const { owner, approve, exchange } = await consenting();
    const codes = await Promise.all(Array.from({ length: 16 }, approve));
    const killer = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] })).token!.accessToken;
    const calls: Promise<unknown>[] = codes.map(exchange);
    calls.splice(4, 0, call("/mcp/treasury", killer, "killSwitch.all"));
    await Promise.all(calls);
    expect(await activeGrants("user_id", [owner.userId])).to.equal(0);
  });

  it("the owner's revoke of one grant racing exchanges of that agent's codes leaves no code of it exchangeable", async () => {
    const { owner, sessionToken, approve, exchange } = await consenting();
    const first = await exchange(await approve());
    const codes = await Promise.all(Array.from({ length: 16 }, approve));
    const answers: Promise<{ status: number; body: Record<string, unknown> }>[] = codes.slice(0, 8).map(exchange);
    const revoked = stack.clients.grants.revokeUserGrant({ sessionToken, grantId: first.body.jti as string });
    const done = await Promise.all(answers);
    await revoked;
    const late = await Promise.all(codes.slice(8).map(exchange));
    expect(late.map((a) => [a.status, a.body.error])).to.deep.equal(late.map(() => [400, "invalid_grant"]));
    // Each code either minted its grant before the revoke or is gone; none waits to mint one after it.
    for (const a of done) expect([200, 400]).to.include(a.status);
    const minted = done.filter((a) => a.status === 200).map((a) => a.body.jti as string);
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM authorization_codes WHERE user_id = ? AND consumed_at IS NULL`, [owner.userId]);
    expect(rows[0].n).to.equal(0);
    const active = await stack.core.db("grants").where({ user_id: owner.userId, state: "active" }).pluck("id");
    expect(active.sort()).to.deep.equal(minted.sort());
    expect(await activeGrants("lineage_id", [first.body.jti as string])).to.equal(0);
  });
});
