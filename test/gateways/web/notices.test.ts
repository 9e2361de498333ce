import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { formFields, oauthGrant, type Jar } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";

/** Every notice the pages could once be made to show by a link alone. */
const FLAGS = [
  "killed",
  "payment-approved",
  "budget-activated",
  "payment-declined",
  "budget-declined",
  "funded",
  "fund-replayed",
  "closed",
  "closed-kept",
  "already-closed",
  "swept",
  "nothing-to-sweep",
  "stepped-up",
  "added",
  "removed",
];

/**
 * Success notices after an action (kill switch, revoke, approvals, money forms, passkeys) come
 * from a one-time cookie the action sets: a crafted link shows none, the real action shows it once.
 */
describe("web pages: success notices cannot be forged by a link", () => {
  let stack: TestStack;
  before(async function () {
    this.timeout(120_000);
    stack = await startStack({ gateway: true, publicUrls: true, signinMethods: ["email", "passkey"], scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const verify = (accessToken: string) => stack.clients.grants.verifyAgentToken({ accessToken });
  const text = async (jar: Jar, path: string) => {
    const res = await jar.get(path);
    expect(res.status, path).to.equal(200);
    return res.text();
  };
  const agentPathOf = async (jar: Jar) => /href="(\/dashboard\/agents\/[0-9a-f-]{36})"/.exec(await text(jar, "/dashboard/agents"))![1]!;

  it("hostile: a crafted ?done= or ?revoked= link shows no notice, and the agents keep their access", async () => {
    const { jar, token } = await oauthGrant(stack, { scope: "accounts:read" });
    const { access_token: accessToken, jti } = token.body as { access_token: string; jti: string };
    const agent = await agentPathOf(jar);
    for (const path of ["/dashboard/agents", "/dashboard/money", agent, "/dashboard/passkeys"]) {
      for (const done of FLAGS) {
        const page = await text(jar, `${path}?done=${done}`);
        expect(page, `${path}?done=${done}`).to.not.include('class="card ok"');
      }
    }
    expect(await text(jar, `${agent}?revoked=${jti}`)).to.not.include("was revoked");
    expect((await verify(accessToken)).grant).to.not.equal(undefined);
    // A grant revoked elsewhere: the old link's claim would be true but stale; it still shows nothing.
    await stack.clients.grants.revokeUserGrant({ sessionToken: jar.cookies.get("vg_session")!, grantId: jti });
    expect(await text(jar, `${agent}?revoked=${jti}`)).to.not.include("was revoked");
  });

  it("the kill switch leaves its notice in a one-time HttpOnly SameSite=Strict cookie: shown once, then gone", async () => {
    const { jar, token } = await oauthGrant(stack, { scope: "accounts:read" });
    const res = await jar.post("/dashboard/kill-switch", formFields(await text(jar, "/dashboard/agents"), "/dashboard/kill-switch"));
    expect(res.status).to.equal(303);
    expect(res.headers.get("location")).to.equal("/dashboard/agents");
    const set = res.headers.getSetCookie().find((c) => c.startsWith("vg_notice="))!;
    expect(set.split(";").map((p) => p.trim())).to.include.members(["Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=60"]);
    expect(set).to.match(/^vg_notice=killed\.[\w-]{43};/);
    await expectRefused(verify((token.body as { access_token: string }).access_token), Reason.INVALID_TOKEN, /revoked/);
    const shown = await jar.get("/dashboard/agents");
    expect(await shown.text()).to.include("Every grant was revoked. All agents have lost access.");
    expect(shown.headers.getSetCookie().some((c) => /^vg_notice=;.*Max-Age=0/.test(c))).to.equal(true);
    expect(jar.cookies.has("vg_notice")).to.equal(false);
    expect(await text(jar, "/dashboard/agents")).to.not.include('class="card ok"');
  });

  it("a HEAD request (a link preview, a prefetch) leaves the notice for the page the person opens", async () => {
    const { jar } = await oauthGrant(stack, { scope: "accounts:read" });
    await jar.post("/dashboard/kill-switch", formFields(await text(jar, "/dashboard/agents"), "/dashboard/kill-switch"));
    const head = await jar.request("/dashboard/agents", { method: "HEAD" });
    expect(head.status).to.equal(200);
    expect(head.headers.getSetCookie().filter((c) => c.startsWith("vg_notice="))).to.deep.equal([]);
    expect(await text(jar, "/dashboard/agents")).to.include("Every grant was revoked. All agents have lost access.");
    expect(jar.cookies.has("vg_notice")).to.equal(false);
  });

  it("a revoke's notice names its agent: shown once on that agent's page, and nowhere else", async () => {
    const { jar, token } = await oauthGrant(stack, { scope: "accounts:read" });
    const { access_token: accessToken, jti } = token.body as { access_token: string; jti: string };
    const agent = await agentPathOf(jar);
    const res = await jar.post(`${agent}/grants/${jti}/revoke`, formFields(await text(jar, agent), `${agent}/grants/${jti}/revoke`));
    expect(res.headers.get("location")).to.equal(agent);
    await expectRefused(verify(accessToken), Reason.INVALID_TOKEN, /revoked/);
    const notice = jar.cookies.get("vg_notice")!;
    expect(notice).to.match(new RegExp(`^revoked\\.${agent.slice(-36)}\\.[\\w-]{43}$`));
    expect(await text(jar, "/dashboard/agents")).to.not.include('class="card ok"');
    jar.cookies.set("vg_notice", notice);
    expect(await text(jar, agent)).to.include("The grant was revoked");
    expect(await text(jar, agent)).to.not.include("The grant was revoked");
  });

  it("hostile: a notice planted by a same-site origin over plain http, or one left in another session, shows nothing", async () => {
    const { jar, token } = await oauthGrant(stack, { scope: "accounts:read" });
    const agent = await agentPathOf(jar);
    // Another account's own kill switch: a notice that is genuine, for that session.
    const other = await oauthGrant(stack, { scope: "accounts:read" });
    await other.jar.post("/dashboard/kill-switch", formFields(await text(other.jar, "/dashboard/agents"), "/dashboard/kill-switch"));
    const foreign = other.jar.cookies.get("vg_notice")!;
    expect(foreign.startsWith("killed")).to.equal(true);
    const planted = ["killed", `revoked.${agent.slice(-36)}`, `killed.${"A".repeat(43)}`, foreign, `revoked.${agent.slice(-36)}.${foreign.split(".")[1]}`];
    for (const value of planted) {
      for (const path of ["/dashboard/agents", agent]) {
        jar.cookies.set("vg_notice", value);
        const page = await text(jar, path);
        expect(page, `${path} ${value}`).to.not.include('class="card ok"');
        expect(jar.cookies.has("vg_notice"), "cleared all the same").to.equal(false);
      }
    }
    expect((await verify((token.body as { access_token: string }).access_token)).grant).to.not.equal(undefined);
  });
});
