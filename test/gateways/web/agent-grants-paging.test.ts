import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, formFields, oauthGrant, signIn, type Jar } from "../../support/agent-oauth.js";
import { pendingPayment } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * An agent's page lists its grants page by page (the active ones first, then the newest), with
 * an "Older grants" link carrying core's signed cursor, so no grant is left out however many.
 */
describe("web pages: an agent's grants, paged", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  /**
   * A user's agent with one real grant and `older` superseded ones before it, the oldest of all an
   * active grant its client kept (rows written directly: hundreds of refreshes would take minutes).
   */
  async function agentWithHistory(older: number) {
    const { jar, token, user } = await oauthGrant(stack, { scope: "accounts:read" });
    const jti = (token.body as { jti: string }).jti;
    const real = await stack.core.db("grants").where({ id: jti }).first();
    const base = new Date(real.issued_at).getTime();
    const row = (i: number, state: string) => {
      const id = randomUUID();
      const at = new Date(base - (i + 1) * 60_000);
      const { refresh_hash: _, ...rest } = real;
      return { ...rest, id, lineage_id: id, parent_grant_id: null, successor_id: null, state, issued_at: at, state_changed_at: at };
    };
    const rows = [...Array.from({ length: older }, (_, i) => row(i, "superseded")), row(older, "active")];
    for (let i = 0; i < rows.length; i += 200) await stack.core.db("grants").insert(rows.slice(i, i + 200));
    const path = `/dashboard/agents/${real.agent_principal_id}`;
    return { jar, user, path, newest: jti, oldActive: rows.at(-1)!.id as string, all: [jti, ...rows.map((r) => r.id as string)] };
  }

  const grantIds = (text: string) => [...text.matchAll(/<span title="([0-9a-f-]{36})">Grant/g)].map((m) => m[1]!);
  const olderLink = (text: string) => /<a href="([^"]+)">Older grants<\/a>/.exec(text)?.[1]?.replace(/&amp;/g, "&");
  const page = async (jar: Jar, path: string) => {
    const res = await jar.get(path);
    expect(res.status, path).to.equal(200);
    return res.text();
  };

  it("walks every grant through the Older links, 50 a page, the old active grant first; it can be revoked", async () => {
    const a = await agentWithHistory(520);
    const first = await page(a.jar, a.path);
    expect(grantIds(first).slice(0, 2)).to.deep.equal([a.newest, a.oldActive]);
    expect(first.slice(first.indexOf("Active grants"), first.indexOf("Earlier grants"))).to.include(a.oldActive);
    expect(first).to.not.include("Newest grants");
    const seen: string[] = [];
    let text = first;
    for (let pages = 1; ; pages++) {
      const ids = grantIds(text);
      expect(ids.length, `page ${pages}`).to.be.within(1, 50);
      seen.push(...ids);
      const next = olderLink(text);
      if (!next) break;
      expect(next).to.match(new RegExp(`^${a.path}\\?grants_after=`));
      text = await page(a.jar, next);
      expect(text).to.include(`<a href="${a.path}">Newest grants</a>`);
    }
    expect(seen).to.have.length(a.all.length);
    expect(new Set(seen)).to.deep.equal(new Set(a.all));
    expect(await page(a.jar, "/dashboard/agents")).to.include("2 active grants");

    const action = `${a.path}/grants/${a.oldActive}/revoke`;
    const revoked = await a.jar.post(action, formFields(first, action));
    expect(revoked.status).to.equal(303);
    expect((await stack.core.db("grants").where({ id: a.oldActive }).first("state")).state).to.equal("revoked");
    expect(await page(a.jar, a.path)).to.include("The grant was revoked");
  });

  it("hostile: a changed, malformed, another agent's or another user's cursor is a 400 page, never a 5xx", async () => {
    const a = await agentWithHistory(60);
    const b = await agentWithHistory(60);
    const other = await oauthGrant(stack, { scope: "accounts:read" });
    const cursorOf = async (x: { jar: Jar; path: string }) => olderLink(await page(x.jar, x.path))!.split("grants_after=")[1]!;
    const [ca, cb] = [await cursorOf(a), await cursorOf(b)];
    const [body, sig] = ca.split(".") as [string, string];
    const changed = `${body}.${sig[0] === "A" ? "B" : "A"}${sig.slice(1)}`;
    const json = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as Record<string, unknown>;
    const forged = `${Buffer.from(JSON.stringify({ ...json, s: 1 })).toString("base64url")}.${sig}`;
    for (const cursor of [changed, forged, "abc", "x".repeat(2000), `${ca}.${sig}`, cb]) {
      const res = await a.jar.get(`${a.path}?grants_after=${encodeURIComponent(cursor)}`);
      expect(res.status, cursor.slice(0, 40)).to.equal(400);
      const text = await res.text();
      expect(text).to.include("This page link cannot be used");
      expect(grantIds(text)).to.deep.equal([]);
    }
    const repeated = await a.jar.get(`${a.path}?grants_after=${ca}&grants_after=${ca}`);
    expect(repeated.status).to.equal(400);
    // Another user holding A's page address and cursor sees no grant of A's.
    const foreign = await other.jar.get(`${a.path}?grants_after=${ca}`);
    expect(foreign.status).to.equal(400);
    expect(grantIds(await foreign.text())).to.deep.equal([]);
    // Core itself: a cursor on another agent's list, and a page bigger than 100, are refused.
    const session = b.jar.cookies.get("vg_session")!;
    await expectRefused(stack.clients.grants.getAgent({ sessionToken: session, agentId: b.path.slice(-36), cursor: ca }), Reason.INVALID_CURSOR);
    await expectRefused(stack.clients.grants.getAgent({ sessionToken: session, agentId: b.path.slice(-36), limit: 101 }), Reason.INVALID_REQUEST);
    const { agent, nextCursor } = await stack.clients.grants.getAgent({ sessionToken: session, agentId: b.path.slice(-36), cursor: cb, limit: 100 });
    expect(agent!.grants).to.have.length(12);
    expect(nextCursor).to.equal("");
  });

  it("paging the grants keeps the pending payments where they are, and the other way round", async () => {
    const { rpc, user, agent, args } = await pendingPayment(stack, {
      key: `both-${randomUUID()}`,
      amountCents: 6_000,
      address: "0xabc0000000000000000000000000000000000007",
    });
    for (let i = 0; i < 20; i++) await rpc("/mcp/write", agent, "payments.initiate", { ...args, idempotency_key: `both-${randomUUID()}` });
    const { jti } = JSON.parse(Buffer.from(agent.split(".")[1]!, "base64url").toString("utf8")) as { jti: string };
    const real = await stack.core.db("grants").where({ id: jti }).first();
    // 55 older grants of the budget's agent: two pages of grants beside two pages of payments.
    const row = (i: number) => {
      const id = randomUUID();
      const at = new Date(new Date(real.issued_at).getTime() - (i + 1) * 60_000);
      return { ...real, id, lineage_id: id, refresh_hash: null, state: "superseded", issued_at: at, state_changed_at: at };
    };
    await stack.core.db("grants").insert(Array.from({ length: 55 }, (_, i) => row(i)));
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const path = `/dashboard/agents/${real.agent_principal_id}`;
    const nextPayments = (text: string) => /<a rel="next" href="([^"]+)">Next payments →<\/a>/.exec(text)?.[1]?.replaceAll("&amp;", "&");
    const first = await page(jar, path);
    const toPayments = nextPayments(first)!;
    const toGrants = olderLink(first)!;
    // Grants first, then payments: the payments link keeps the grants' place.
    const grants2 = await page(jar, toGrants);
    const both = nextPayments(grants2)!;
    expect(new URL(both, stack.url).searchParams.get("grants_after")).to.equal(new URL(toGrants, stack.url).searchParams.get("grants_after"));
    expect(grantIds(await page(jar, both))).to.deep.equal(grantIds(grants2));
    // Payments first, then grants: the Older link keeps the payments' place.
    const payments2 = await page(jar, toPayments);
    const older = olderLink(payments2)!;
    expect(new URL(older, stack.url).searchParams.get("payments_after")).to.equal(new URL(toPayments, stack.url).searchParams.get("payments_after"));
    const text = await page(jar, older);
    expect(nextPayments(text)).to.equal(undefined);
    expect(grantIds(text)).to.deep.equal(grantIds(grants2));
    // "Newest grants" goes back to the first grants only, the payments staying on their page.
    const newest = /<a href="([^"]+)">Newest grants<\/a>/.exec(text)![1]!.replaceAll("&amp;", "&");
    expect(new URL(newest, stack.url).searchParams.get("payments_after")).to.equal(new URL(toPayments, stack.url).searchParams.get("payments_after"));
    expect(new URL(newest, stack.url).searchParams.has("grants_after")).to.equal(false);
  });
});
