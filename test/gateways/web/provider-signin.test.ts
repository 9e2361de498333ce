import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, signIn } from "../../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { freePort } from "../../support/ports.js";

/** The pages of sign-in at an organisation's OpenID Connect provider, over HTTP on a real port. */
describe("web pages: sign-in at the organisation's provider", () => {
  let stack: TestStack;
  let idp: TestIdp;
  before(async function () {
    this.timeout(180_000);
    // Core discovers the provider on first use, so the provider can start after the stack.
    const port = await freePort();
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: [] },
    });
    idp = await startIdp({ redirectUris: [`${stack.url}/signin/oidc/callback`], port });
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
  });

  it("the sign-in page offers the organisation's provider, keeping where to return", async () => {
    const page = await (await createJar(stack.url).get(`/signin?return_to=${encodeURIComponent("/dashboard/money")}`)).text();
    expect(page).to.include(`href="/signin/oidc?return_to=%2Fdashboard%2Fmoney"`);
    expect(page).to.include("Sign in with your organisation");
  });

  it("provider down: the page says so with 503, and no flow is started", async () => {
    await idp.setDown(true);
    try {
      const jar = createJar(stack.url);
      const res = await jar.get("/signin/oidc");
      expect(res.status).to.equal(503);
      expect(res.headers.get("content-type")).to.match(/text\/html/);
      expect(await res.text()).to.match(/Temporarily unavailable/);
      expect(res.headers.getSetCookie().some((c) => /^vg_oidc(\.[\w-]+)?=[^;]/.test(c))).to.equal(false);
    } finally {
      await idp.setDown(false);
    }
  });

  it("sends the browser to the provider and signs the person in at the callback; a replayed callback is a page to act on", async () => {
    const user = await createUser(stack);
    const sub = `web-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    const go = await jar.get(`/signin/oidc?return_to=${encodeURIComponent("/dashboard/agents")}`);
    expect(go.status).to.equal(303);
    const location = go.headers.get("location")!;
    expect(location.startsWith(idp.issuer)).to.equal(true);
    const callback = await idp.signIn(location, sub);
    expect(callback.startsWith(`${stack.url}/signin/oidc/callback?`)).to.equal(true);
    const back = await jar.get(callback);
    expect(back.status).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/agents");
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);

    // The same callback again (its cookie is gone, the flow used): a 403 page, no stack trace.
    const again = await jar.get(callback);
    expect(again.status).to.equal(403);
    const text = await again.text();
    expect(text).to.match(/start again from the sign-in page/);
    expect(text).not.to.match(/at .*\.ts:\d+/);
  });

  it("two sign-ins begun in two tabs of one browser both finish, each back where it began", async () => {
    const user = await createUser(stack);
    const sub = `tabs-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    const first = await jar.get(`/signin/oidc?return_to=${encodeURIComponent("/dashboard/money")}`);
    const second = await jar.get(`/signin/oidc?return_to=${encodeURIComponent("/dashboard/agents")}`);
    expect([...jar.cookies.keys()].filter((name) => name.startsWith("vg_oidc.")).length).to.equal(2);
    const firstBack = await jar.get(await idp.signIn(first.headers.get("location")!, sub));
    expect(firstBack.status).to.equal(303);
    expect(firstBack.headers.get("location")).to.equal("/dashboard/money");
    const secondBack = await jar.get(await idp.signIn(second.headers.get("location")!, sub));
    expect(secondBack.status).to.equal(303);
    expect(secondBack.headers.get("location")).to.equal("/dashboard/agents");
    expect([...jar.cookies.keys()].filter((name) => name.startsWith("vg_oidc"))).to.deep.equal([]);
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);
  });

  it("a browser keeps at most 4 sign-ins under way: a 5th ends the others, so its cookies stay few; the newest finishes", async () => {
    const user = await createUser(stack);
    const sub = `many-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    const flows = () => [...jar.cookies.keys()].filter((name) => name.startsWith("vg_oidc"));
    let last: Response | undefined;
    for (let i = 1; i <= 9; i++) {
      last = await jar.get("/signin/oidc");
      expect(flows().length, `after start ${i}`).to.be.at.most(8);
    }
    const back = await jar.get(await idp.signIn(last!.headers.get("location")!, sub));
    expect(back.status).to.equal(303);
  });

  it("a mangled return cookie does not break the callback: the person lands on the dashboard", async () => {
    const user = await createUser(stack);
    const sub = `web-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    const go = await jar.get(`/signin/oidc?return_to=${encodeURIComponent("/dashboard/money")}`);
    const state = new URL(go.headers.get("location")!).searchParams.get("state")!;
    jar.cookies.set(`vg_oidc_return.${state.slice(0, 16)}`, "%E0%A4%A");
    const back = await jar.get(await idp.signIn(go.headers.get("location")!, sub));
    expect(back.status).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/agents");
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);
  });

  it("another subject given a linked person's address cannot take the account over; the person still signs in", async () => {
    const user = await createUser(stack);
    const sub = `web-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const signIn = async (who: string) => {
      const jar = createJar(stack.url);
      const back = await jar.get(await idp.signIn((await jar.get("/signin/oidc")).headers.get("location")!, who));
      return { back, jar };
    };
    expect((await signIn(sub)).back.status).to.equal(303);
    // The provider renames the person and hands the old address, verified, to a new account.
    await idp.addAccount({ sub, email: `renamed-${user.email}`, email_verified: true });
    const newcomer = `new-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub: newcomer, email: user.email, email_verified: true });
    const taken = await signIn(newcomer);
    expect(taken.back.status).to.equal(403);
    expect(await taken.back.text()).to.match(/start again from the sign-in page/);
    expect((await taken.jar.get("/dashboard/agents")).status).to.not.equal(200);
    const honest = await signIn(sub);
    expect(honest.back.status).to.equal(303);
    expect((await honest.jar.get("/dashboard/agents")).status).to.equal(200);
  });

  it("hostile provider: a subject holding NUL, or longer than 255 characters, is a 403 page, never a 5xx, and links nobody", async () => {
    const user = await createUser(stack);
    // Random hex, which PostgreSQL cannot compress below its index row limit.
    for (const sub of [`nul\u0000${user.userId}`, randomBytes(2000).toString("hex"), "s".repeat(256)]) {
      await idp.addAccount({ sub, email: user.email, email_verified: true });
      const jar = createJar(stack.url);
      const back = await jar.get(await idp.signIn((await jar.get("/signin/oidc")).headers.get("location")!, sub));
      expect(back.status, sub.slice(0, 20)).to.equal(403);
      expect(await back.text()).to.match(/start again from the sign-in page/);
      expect((await jar.get("/dashboard/agents")).status).to.not.equal(200);
    }
    // A well-formed subject of the same person still links and signs in.
    const sub = "s".repeat(255);
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    expect((await jar.get(await idp.signIn((await jar.get("/signin/oidc")).headers.get("location")!, sub))).status).to.equal(303);
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);
  });

  it("a callback brought to another browser (no flow cookie) is refused", async () => {
    const user = await createUser(stack);
    const sub = `web-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const victim = createJar(stack.url);
    const go = await createJar(stack.url).get("/signin/oidc");
    const callback = await idp.signIn(go.headers.get("location")!, sub);
    const res = await victim.get(callback);
    expect(res.status).to.equal(403);
    expect((await victim.get("/dashboard/agents")).status).to.not.equal(200);
  });
  it("an over-long callback is a 400 page in words a person reads, naming no field", async () => {
    const jar = createJar(stack.url);
    const go = await jar.get("/signin/oidc");
    expect(go.status).to.equal(303);
    const res = await jar.get(`/signin/oidc/callback?code=x&state=${"s".repeat(5000)}`);
    expect(res.status).to.equal(400);
    const text = await res.text();
    expect(text).to.match(/the answer from your organisation(&#39;|')s sign-in provider is too long/);
    expect(text).not.to.match(/callback_url/);
    expect((await jar.get("/dashboard/agents")).status).to.not.equal(200);
  });

  it("a person signed in by e-mailed code confirms at the provider with the same verified address: it counts, and links them", async () => {
    const user = await createUser(stack);
    const sub = `code-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const page = await (await jar.get(`/stepup?return_to=${encodeURIComponent("/dashboard/money")}`)).text();
    const link = /href="(\/signin\/oidc\?step_up=1&amp;return_to=[^"]+)"/.exec(page)![1]!.replace(/&amp;/g, "&");
    const back = await jar.get(await idp.signIn((await jar.get(link)).headers.get("location")!, sub));
    expect(back.status, await back.clone().text()).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/money");
    const token = jar.cookies.get("vg_session")!;
    expect((await stack.clients.grants.getSession({ sessionToken: token })).session!.stepUpFresh).to.equal(true);
    // Linked now: a later sign-in at the provider finds the same person by subject.
    const again = createJar(stack.url);
    expect((await again.get(await idp.signIn((await again.get("/signin/oidc")).headers.get("location")!, sub))).status).to.equal(303);
  });

  it("hostile: a step-up at the provider with an unverified, or another, address does not count and links nobody", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    const unverified = `unv-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub: unverified, email: user.email, email_verified: false });
    const stranger = await createUser(stack);
    const other = `oth-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub: other, email: stranger.email, email_verified: true });
    for (const who of [unverified, other]) {
      const back = await jar.get(await idp.signIn((await jar.get("/signin/oidc?step_up=1")).headers.get("location")!, who));
      expect(back.status, who).to.equal(403);
      expect(await back.text()).to.match(/try the confirmation again/);
      expect((await stack.clients.grants.getSession({ sessionToken: jar.cookies.get("vg_session")! })).session!.stepUpFresh).to.equal(false);
    }
    // The unverified subject was not linked to the person: signing in with it still finds nobody.
    const probe = createJar(stack.url);
    expect((await probe.get(await idp.signIn((await probe.get("/signin/oidc")).headers.get("location")!, unverified))).status).to.equal(403);
  });
});
