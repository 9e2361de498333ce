import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, signIn, type Jar } from "../../support/agent-oauth.js";
import { ownerSession, pendingPayment } from "../../support/budgets.js";
import { requirePostgres } from "../../support/db.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * The agents overview lists 50 agents a page, newest first, with a "More agents" link carrying
 * core's signed cursor; pending items name their agents wherever in the list those stand.
 */
describe("web pages: the user's agents, paged", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  /** `n` OAuth agents of the user, newer than any before (rows written directly: consents for each would take minutes). */
  async function addAgents(user: { userId: string; vaultId: string }, n: number, grantsEach = 0) {
    const { userId, vaultId } = user;
    const base = stack.clock().getTime() + 3600_000;
    const agents = Array.from({ length: n }, (_, i) => ({
      id: randomUUID(),
      user_id: userId,
      display_name: `Bot ${i}`,
      created_at: new Date(base + (i >> 1) * 1000),
    }));
    await stack.core.db("agent_principals").insert(agents);
    await stack.core.db("oauth_agents").insert(agents.map((a) => ({ user_id: userId, client_id: `test-${a.id}`, agent_principal_id: a.id })));
    const now = stack.clock();
    const grant = (agentId: string, i: number) => {
      const id = randomUUID();
      const at = new Date(now.getTime() - i * 1000);
      return {
        id,
        lineage_id: id,
        user_id: userId,
        agent_principal_id: agentId,
        vault_id: vaultId,
        scopes: ["accounts:read"],
        state: "active",
        issued_at: at,
        expires_at: new Date(now.getTime() + 3600_000),
        state_changed_at: at,
      };
    };
    const grants = agents.flatMap((a) => Array.from({ length: grantsEach }, (_, i) => grant(a.id, i)));
    for (let i = 0; i < grants.length; i += 200) await stack.core.db("grants").insert(grants.slice(i, i + 200));
    // Newest first, the id breaking ties (two agents share each second).
    const newest = agents.toSorted((x, y) => y.created_at.getTime() - x.created_at.getTime() || (x.id < y.id ? 1 : -1)).map((a) => a.id);
    return { ids: agents.map((a) => a.id), newest, grants };
  }

  const agentLinks = (text: string) => [...text.matchAll(/<li><a href="\/dashboard\/agents\/([0-9a-f-]{36})">/g)].map((m) => m[1]!);
  const moreLink = (text: string) => /<a rel="next" href="([^"]+)">More agents<\/a>/.exec(text)?.[1]?.replaceAll("&amp;", "&");
  const page = async (jar: Jar, path: string) => {
    const res = await jar.get(path);
    expect(res.status, path).to.equal(200);
    return res.text();
  };

  it("a user with more agents than a page sees 50 at a time, each once, and a pending payment names its agent from a later page", async () => {
    const { user, paymentId } = await pendingPayment(stack, {
      key: `agents-${randomUUID()}`,
      amountCents: 6_000,
      address: "0xabc0000000000000000000000000000000000008",
    });
    const added = await addAgents(user, 61, 4);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const first = await page(jar, "/dashboard/agents");
    expect(agentLinks(first)).to.deep.equal(added.newest.slice(0, 50));
    expect(first).to.include("4 active grants");
    expect(first).to.not.include("First agents");
    // The payment's agent (the budget's) is on a later page, and still named by its budget.
    expect(first).to.include(`href="/dashboard/approvals/payments/${paymentId}"`);
    expect(first).to.include("requested by <strong>\u2068Trip budget\u2069</strong>");
    const seen = [...agentLinks(first)];
    let text = first;
    for (let next = moreLink(text); next; next = moreLink(text)) {
      expect(next).to.match(/^\/dashboard\/agents\?agents_after=/);
      text = await page(jar, next);
      expect(text).to.include('<a href="/dashboard/agents">First agents</a>');
      expect(text).to.include("requested by <strong>\u2068Trip budget\u2069</strong>");
      seen.push(...agentLinks(text));
    }
    expect(seen).to.have.length(63);
    expect(new Set(seen).size).to.equal(63);
    expect(seen).to.include.members(added.ids);
    // Core: counts all active grants, embeds the newest three of them.
    const session = jar.cookies.get("vg_session")!;
    const { agents } = await stack.clients.grants.listAgents({ sessionToken: session, agentIds: [added.ids[0]!] });
    expect(agents[0]!.activeGrants).to.equal(4);
    expect(agents[0]!.grants.map((g) => g.grantId)).to.deep.equal(
      added.grants
        .filter((g) => g.agent_principal_id === added.ids[0])
        .slice(0, 3)
        .map((g) => g.id),
    );
  });

  it("hostile: a changed, malformed, another list's or another user's cursor is a 400 page, never a 5xx; core refuses it INVALID_CURSOR", async () => {
    const a = await createUser(stack);
    const b = await createUser(stack);
    const mine = await addAgents(a, 55, 2);
    const theirs = await addAgents(b, 55);
    const [ja, jb] = [createJar(stack.url), createJar(stack.url)];
    await signIn(stack, ja, a.email);
    await signIn(stack, jb, b.email);
    const cursorOf = async (jar: Jar) => moreLink(await page(jar, "/dashboard/agents"))!.split("agents_after=")[1]!;
    const [ca, cb] = [await cursorOf(ja), await cursorOf(jb)];
    const [body, sig] = ca.split(".") as [string, string];
    const changed = `${body}.${sig[0] === "A" ? "B" : "A"}${sig.slice(1)}`;
    const json = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as Record<string, unknown>;
    const forged = `${Buffer.from(JSON.stringify({ ...json, u: b.userId })).toString("base64url")}.${sig}`;
    const session = ja.cookies.get("vg_session")!;
    const grantsCursor = (await stack.clients.grants.getAgent({ sessionToken: session, agentId: mine.ids[0]!, limit: 1 })).nextCursor;
    expect(grantsCursor).to.not.equal("");
    for (const cursor of [changed, forged, cb, "abc", "x".repeat(2000), `${ca}.${sig}`, grantsCursor, `${body}.${randomBytes(16).toString("base64url")}`]) {
      const res = await ja.get(`/dashboard/agents?agents_after=${encodeURIComponent(cursor)}`);
      expect(res.status, cursor.slice(0, 40)).to.equal(400);
      const text = await res.text();
      expect(text).to.include("This page link cannot be used");
      expect(agentLinks(text)).to.deep.equal([]);
    }
    // B holding A's address sees none of A's agents.
    const foreign = await jb.get(`/dashboard/agents?agents_after=${ca}`);
    expect(foreign.status).to.equal(400);
    expect(await foreign.text()).to.not.match(new RegExp(mine.ids.join("|")));
    await expectRefused(stack.clients.grants.listAgents({ sessionToken: session, cursor: cb }), Reason.INVALID_CURSOR);
    await expectRefused(stack.clients.grants.listAgents({ sessionToken: session, limit: 101 }), Reason.INVALID_REQUEST);
    await expectRefused(stack.clients.grants.listAgents({ sessionToken: session, agentIds: mine.ids.slice(0, 1), cursor: ca }), Reason.INVALID_REQUEST);
    await expectRefused(
      stack.clients.grants.listAgents({ sessionToken: session, agentIds: Array.from({ length: 101 }, () => randomUUID()) }),
      Reason.INVALID_REQUEST,
    );
    // By id: B's agents and ids that are no ids are left out.
    const byId = await stack.clients.grants.listAgents({ sessionToken: session, agentIds: [mine.ids[3]!.toUpperCase(), theirs.ids[0]!, "nope", ""] });
    expect(byId.agents.map((x) => x.agentId)).to.deep.equal([mine.ids[3]]);
    expect(byId.nextCursor).to.equal("");
  });

  it("many walks of the pages while grants are issued and revoked see each agent exactly once (PostgreSQL only)", async function () {
    requirePostgres(this, "needs concurrent transactions on separate connections");
    const user = await createUser(stack);
    const { ids, grants } = await addAgents(user, 60, 2);
    const session = await ownerSession(stack, user.userId);
    const walk = async () => {
      const seen: string[] = [];
      let cursor = "";
      do {
        const res = await stack.clients.grants.listAgents({ sessionToken: session, limit: 7, cursor });
        seen.push(...res.agents.map((x) => x.agentId));
        cursor = res.nextCursor;
      } while (cursor);
      return seen;
    };
    const writes = [
      ...grants.map((g) => stack.clients.grants.revokeUserGrant({ sessionToken: session, grantId: g.id })),
      ...Array.from({ length: 30 }, () => stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] })),
    ];
    const walks = await Promise.all([...Array.from({ length: 12 }, walk), ...writes]).then((r) => r.slice(0, 12) as string[][]);
    for (const seen of walks) {
      expect(new Set(seen).size, "each agent at most once").to.equal(seen.length);
      expect(seen).to.include.members(ids);
    }
    const after = await walk();
    expect(after).to.have.length(61); // the operator's agent joined with the first IssueGrant
  });

  it("paging the agents keeps the pending payments where they are, and the other way round", async () => {
    const { rpc, user, agent, args } = await pendingPayment(stack, {
      key: `keep-${randomUUID()}`,
      amountCents: 6_000,
      address: "0xabc0000000000000000000000000000000000006",
    });
    for (let i = 0; i < 20; i++) await rpc("/mcp/write", agent, "payments.initiate", { ...args, idempotency_key: `keep-${randomUUID()}` });
    await addAgents(user, 55);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const param = (link: string, name: string) => new URL(link, stack.url).searchParams.get(name);
    const nextPayments = (text: string) => /<a rel="next" href="([^"]+)">Next payments →<\/a>/.exec(text)?.[1]?.replaceAll("&amp;", "&");
    const first = await page(jar, "/dashboard/agents");
    const [toAgents, toPayments] = [moreLink(first)!, nextPayments(first)!];
    const agents2 = await page(jar, toAgents);
    expect(param(nextPayments(agents2)!, "agents_after")).to.equal(param(toAgents, "agents_after"));
    const payments2 = await page(jar, toPayments);
    const both = moreLink(payments2)!;
    expect(param(both, "payments_after")).to.equal(param(toPayments, "payments_after"));
    const text = await page(jar, both);
    expect(agentLinks(text)).to.deep.equal(agentLinks(agents2));
    expect(nextPayments(text)).to.equal(undefined);
    const firstAgents = /<a href="([^"]+)">First agents<\/a>/.exec(text)![1]!.replaceAll("&amp;", "&");
    expect([param(firstAgents, "agents_after"), param(firstAgents, "payments_after")]).to.deep.equal([null, param(toPayments, "payments_after")]);
  });
});
