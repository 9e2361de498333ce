import { expect } from "chai";
import type { Knex } from "knex";
import { requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { codeExchangeForm, consentCode, createJar, createUser, formFields, oauthGrant, postForm, type Jar } from "../../support/agent-oauth.js";

type Token = { access_token: string; refresh_token: string; jti: string };

/**
 * Revoke and the kill switch racing a refresh of the same lineage: the refresh's successor is
 * inserted while the revocation waits on the row the refresh holds. Whatever order the two
 * commit in, nothing of the lineage is usable once the page says it was revoked.
 */
describe("web revoke and kill switch racing a refresh (PostgreSQL only: needs concurrent transactions)", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the race needs concurrent transactions");
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const waiting = async () =>
    Number((await stack.core.db.raw(`SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rows[0].n);

  /** Holds the grant's row while `first` then `second` queue for it, then lets them run in that order. */
  async function inOrder<A, B>(grantId: string, first: () => Promise<A>, second: () => Promise<B>): Promise<[A, B]> {
    const holder: Knex.Transaction = await stack.core.db.transaction();
    await holder.raw(`SELECT id FROM grants WHERE id = ? FOR UPDATE`, [grantId]);
    const before = await waiting();
    const a = first();
    while ((await waiting()) < before + 1) await new Promise((r) => setImmediate(r));
    const b = second();
    while ((await waiting()) < before + 2) await new Promise((r) => setImmediate(r));
    await holder.commit();
    return Promise.all([a, b]);
  }

  async function setUp() {
    const { client, jar, token, user } = await oauthGrant(stack);
    const t = token.body as Token;
    const refresh = (refreshToken: string) =>
      postForm(`${stack.url}/oauth2/token`, {
        grant_type: "refresh_token",
        refresh_token: refreshToken,
        client_id: client.client_id,
        client_secret: client.client_secret,
      });
    const { lineage_id: lineage } = await stack.core.db("grants").where({ id: t.jti }).first("lineage_id");
    const active = async () => Number((await stack.core.db("grants").where({ lineage_id: lineage, state: "active" }).count({ n: "*" }))[0]!.n);
    const activeOfUser = async () => Number((await stack.core.db("grants").where({ user_id: user.userId, state: "active" }).count({ n: "*" }))[0]!.n);
    return { jar, t, refresh, active, activeOfUser };
  }

  const agentPage = async (jar: Jar) => {
    const list = await (await jar.get("/dashboard/agents")).text();
    const path = /href="(\/dashboard\/agents\/[0-9a-f-]{36})"/.exec(list)![1]!;
    return { path, text: await (await jar.get(path)).text() };
  };

  it("a grant revoked from its agent page while the agent refreshes it leaves no grant of its lineage active", async () => {
    const { jar, t, refresh, active } = await setUp();
    const page = await agentPage(jar);
    const action = `${page.path}/grants/${t.jti}/revoke`;
    const [renewed, revoked] = await inOrder(
      t.jti,
      () => refresh(t.refresh_token),
      () => jar.post(action, formFields(page.text, action)),
    );
    expect(renewed.status, JSON.stringify(renewed.body)).to.equal(200);
    expect(revoked.status).to.equal(303);
    expect(await active()).to.equal(0);
    expect((await refresh((renewed.body as Token).refresh_token)).status).to.equal(400);
  });

  it("the kill switch pulled while an agent refreshes leaves no grant of the user active", async () => {
    const { jar, t, refresh, activeOfUser } = await setUp();
    const dash = await (await jar.get("/dashboard/agents")).text();
    const [renewed, killed] = await inOrder(
      t.jti,
      () => refresh(t.refresh_token),
      () => jar.post("/dashboard/kill-switch", formFields(dash, "/dashboard/kill-switch")),
    );
    expect(renewed.status, JSON.stringify(renewed.body)).to.equal(200);
    expect(killed.status).to.equal(303);
    expect(await activeOfUser()).to.equal(0);
    expect((await refresh((renewed.body as Token).refresh_token)).status).to.equal(400);
  });
  it("many revokes at once, every other one pairing an agent with another agent's grant: only the named agents' own grants go", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const agents: { jti: string; path: string }[] = [];
    for (let i = 0; i < 6; i++) {
      const c = await consentCode(stack, user, jar);
      const { jti } = (await postForm(`${stack.url}/oauth2/token`, codeExchangeForm(c))).body as Token;
      const { agent_principal_id: id } = await stack.core.db("grants").where({ id: jti }).first("agent_principal_id");
      agents.push({ jti, path: `/dashboard/agents/${id}` });
    }
    const fields = formFields(await (await jar.get(agents[0]!.path)).text(), `${agents[0]!.path}/grants/${agents[0]!.jti}/revoke`);
    const state = async (jti: string) => (await stack.core.db("grants").where({ id: jti }).first("state")).state as string;
    const answers = await Promise.all(
      agents.flatMap((a, i) => {
        const other = agents[(i + 1) % agents.length]!;
        const crafted = jar.post(`${a.path}/grants/${other.jti}/revoke`, fields);
        return i % 2 === 0 ? [crafted, jar.post(`${a.path}/grants/${a.jti}/revoke`, fields)] : [crafted];
      }),
    );
    let k = 0;
    for (const [i, a] of agents.entries()) {
      expect(answers[k++]!.status, `crafted ${i}`).to.equal(404);
      if (i % 2 === 0) {
        const own = answers[k++]!;
        expect(own.headers.get("location"), `own ${i}`).to.equal(a.path);
        expect(own.headers.getSetCookie()[0], `own ${i}`).to.match(new RegExp(`^vg_notice=revoked\\.${a.path.slice(-36)}\\.[\\w-]{43};`));
      }
      expect(await state(a.jti), `agent ${i}`).to.equal(i % 2 === 0 ? "revoked" : "active");
    }
  });
});
