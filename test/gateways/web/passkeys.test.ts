import { expect } from "chai";
import type { Interceptor } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { createInProcessTransport } from "../../../core/in-process-transport.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { passkeyOptionsOf, softPasskey, type SoftPasskey } from "../../support/soft-passkey.js";
import { startStack, type TestStack } from "../../support/stack.js";

/**
 * The passkey pages over HTTP on a real port, with a software authenticator standing in
 * for the browser's WebAuthn script: add after step-up, list, remove with CSRF, step-up and
 * sign-in; a form posted without the script's answer is a page that says what to do.
 */
describe("web: passkey pages", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let origin: string;

  before(async () => {
    stack = await startStack({ gateway: true, signinMethods: ["email", "passkey"], scrypt: { N: 1024, r: 8, p: 1 } });
    origin = new URL(stack.issuer).origin;
  });
  after(async () => {
    await stack?.close();
  });

  async function ownerWithPasskey(name = "work laptop"): Promise<{ jar: Jar; email: string; key: SoftPasskey }> {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email, "/dashboard/passkeys");
    const gate = await jar.get("/dashboard/passkeys/add");
    expect(gate.status).to.equal(303);
    expect(gate.headers.get("location")).to.equal("/stepup?return_to=%2Fdashboard%2Fpasskeys%2Fadd");
    await stepUp(stack, jar, user.email, gate.headers.get("location")!);
    const add = await jar.get("/dashboard/passkeys/add");
    expect(add.headers.get("content-security-policy")).to.include("script-src 'self'");
    const page = await add.text();
    expect(page).to.include("<noscript>");
    const key = softPasskey();
    const done = await jar.post("/dashboard/passkeys/add", {
      ...formFields(page, "/dashboard/passkeys/add"),
      name,
      response: key.create(passkeyOptionsOf(page), origin),
    });
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal("/dashboard/passkeys");
    return { jar, email: user.email, key };
  }

  it("every dashboard page links to the Passkeys page, which offers to add one", async () => {
    const jar = createJar(stack.url);
    await signIn(stack, jar, (await createUser(stack)).email);
    for (const path of ["/dashboard/agents", "/dashboard/money", "/dashboard/passkeys"]) {
      expect(await (await jar.get(path)).text(), path).to.include('<a href="/dashboard/passkeys">Passkeys</a>');
    }
    const list = await (await jar.get("/dashboard/passkeys")).text();
    expect(list).to.include('href="/dashboard/passkeys/add"');
    expect(list).to.not.include("not enabled");
  });

  it("adds a passkey after step-up and lists it; removing needs the form's CSRF token", async () => {
    const { jar } = await ownerWithPasskey();
    const list = await (await jar.get("/dashboard/passkeys")).text();
    expect(list).to.include("work laptop");
    const action = /action="(\/dashboard\/passkeys\/[0-9a-f-]{36}\/remove)"/.exec(list)![1]!;
    for (const csrf of [undefined, "forged"]) {
      const res = await jar.post(action, csrf === undefined ? {} : { csrf });
      expect(res.status).to.equal(403);
    }
    expect(await (await jar.get("/dashboard/passkeys")).text()).to.include("work laptop");
    const removed = await jar.post(action, formFields(list, action));
    expect(removed.status).to.equal(303);
    expect(await (await jar.get("/dashboard/passkeys")).text()).to.include("You have no passkeys yet");
  });

  it("a passkey's name is kept to 60 characters without splitting one, and without control characters", async () => {
    const { jar } = await ownerWithPasskey(`  \u0007\u001b${"x".repeat(59)}\u{1F511}more`);
    const list = await (await jar.get("/dashboard/passkeys")).text();
    expect(list).to.include(`${"x".repeat(59)}\u{1F511}<`);
    expect(list).to.not.include("\u001b").and.not.include("\u0007").and.not.include("\ufffd");
  });

  it("a passkey's name loses line separators and bidi controls, so the page and the mail show it as stored; other scripts stay", async () => {
    const shown = "Work \u05de\u05e4\u05ea\u05d7 \u{1F511}";
    const { jar, email } = await ownerWithPasskey("\u202eWork\u2066 \u05de\u05e4\u05ea\u05d7\u2069 \u200f\u061c\u202a\u{1F511}\u2028\u2029");
    expect(await (await jar.get("/dashboard/passkeys")).text()).to.include(`<td>${shown}</td>`);
    const { messages } = await stack.admin.grants.listOutbox({ email });
    expect(messages.map((m) => m.body)).to.include(
      `A passkey named "${shown}" was added to your Vaultgate account. If it was not you, sign in, remove it from the dashboard and use the kill switch.`,
    );
  });

  it("a HEAD (a link checker, a prefetch) starts no ceremony: 405 with Allow, and no flow is written or spent", async () => {
    const { jar } = await ownerWithPasskey();
    const flows = async () => Number((await stack.core.db("signin_flows").count({ n: "*" }))[0]!.n);
    const before = await flows();
    for (const path of ["/signin/passkey", "/stepup/passkey", "/dashboard/passkeys/add", "/signin/oidc", "/signin/oidc/callback?state=x&code=y"]) {
      const res = await jar.request(path, { method: "HEAD" });
      expect(res.status, path).to.equal(405);
      expect(res.headers.get("allow")?.split(", "), path).to.include("GET").and.not.include("HEAD");
    }
    expect(await flows()).to.equal(before);
    // Pages without side effects keep their HEAD.
    expect((await jar.request("/dashboard/passkeys", { method: "HEAD" })).status).to.equal(200);
  });

  it("hostile: a session without a fresh step-up (a stolen cookie) removes no passkey; after one it goes, and the owner is told", async () => {
    const { jar, email } = await ownerWithPasskey();
    stack.clock.advance(601_000);
    const list = await (await jar.get("/dashboard/passkeys")).text();
    const action = /action="(\/dashboard\/passkeys\/[0-9a-f-]{36}\/remove)"/.exec(list)![1]!;
    const gate = await jar.post(action, formFields(list, action));
    expect(gate.status).to.equal(303);
    expect(gate.headers.get("location")).to.equal("/stepup?return_to=%2Fdashboard%2Fpasskeys");
    expect(await (await jar.get("/dashboard/passkeys")).text()).to.include("work laptop");
    await stepUp(stack, jar, email, gate.headers.get("location")!);
    const removed = await jar.post(action, formFields(await (await jar.get("/dashboard/passkeys")).text(), action));
    expect(removed.headers.get("location")).to.equal("/dashboard/passkeys");
    const { messages } = await stack.admin.grants.listOutbox({ email });
    expect(messages.map((m) => m.subject)).to.include("Vaultgate: a passkey was removed from your account");
  });

  it("a step-up that goes stale during the Add ceremony leads to the step-up page and a new ceremony; nothing is added", async () => {
    const { jar, email, key } = await ownerWithPasskey();
    await stepUp(stack, jar, email, "/stepup?return_to=%2Fdashboard%2Fpasskeys%2Fadd");
    const page = await (await jar.get("/dashboard/passkeys/add")).text();
    stack.clock.advance(601_000);
    const late = await jar.post("/dashboard/passkeys/add", {
      ...formFields(page, "/dashboard/passkeys/add"),
      name: "too late",
      response: key.create(passkeyOptionsOf(page), origin),
    });
    expect(late.status).to.equal(303);
    expect(late.headers.get("location")).to.equal("/stepup?return_to=%2Fdashboard%2Fpasskeys%2Fadd");
    expect(await (await jar.get("/dashboard/passkeys")).text()).to.not.include("too late");
  });

  it("the step-up page offers a passkey to people who have one, and a passkey answer steps the session up", async () => {
    const none = createJar(stack.url);
    await signIn(stack, none, (await createUser(stack)).email);
    expect(await (await none.get("/stepup?return_to=%2Fdashboard%2Fagents")).text()).to.not.include("/stepup/passkey");
    const { jar, key } = await ownerWithPasskey();
    stack.clock.advance(601_000);
    expect(await (await jar.get("/stepup?return_to=%2Fdashboard%2Fagents")).text()).to.include('href="/stepup/passkey?return_to=%2Fdashboard%2Fagents"');
    const page = await (await jar.get("/stepup/passkey?return_to=%2Fdashboard%2Fagents")).text();
    const res = await jar.post("/stepup/passkey", { ...formFields(page, "/stepup/passkey"), response: key.get(passkeyOptionsOf(page), origin) });
    expect(res.status).to.equal(303);
    expect(res.headers.get("location")).to.equal("/dashboard/agents");
    // Fresh again: adding another passkey goes straight to the ceremony.
    expect((await jar.get("/dashboard/passkeys/add")).status).to.equal(200);
  });

  it("a form posted without the script's answer, or with garbage, is a 400 page saying what to do", async () => {
    const { jar } = await ownerWithPasskey();
    const page = await (await jar.get("/stepup/passkey?return_to=%2Fdashboard%2Fagents")).text();
    const empty = await jar.post("/stepup/passkey", formFields(page, "/stepup/passkey"));
    expect(empty.status).to.equal(400);
    expect(await empty.text()).to.include("Passkeys need JavaScript");
    const garbage = await jar.post("/stepup/passkey", { ...formFields(page, "/stepup/passkey"), response: "{not json" });
    expect(garbage.status).to.equal(400);
  });

  it("signs in with a passkey; an answer to another page's challenge is refused with a page", async () => {
    const { key } = await ownerWithPasskey();
    const jar = createJar(stack.url);
    expect(await (await jar.get("/signin")).text()).to.include('href="/signin/passkey?return_to=');
    const first = await (await jar.get("/signin/passkey?return_to=%2Fdashboard%2Fpasskeys")).text();
    const second = await (await jar.get("/signin/passkey?return_to=%2Fdashboard%2Fpasskeys")).text();
    const refused = await jar.post("/signin/passkey", { ...formFields(second, "/signin/passkey"), response: key.get(passkeyOptionsOf(first), origin) });
    expect(refused.status).to.equal(403);
    expect(await refused.text()).to.include("signing in with a passkey did not work");
    const again = await (await jar.get("/signin/passkey?return_to=%2Fdashboard%2Fpasskeys")).text();
    const ok = await jar.post("/signin/passkey", { ...formFields(again, "/signin/passkey"), response: key.get(passkeyOptionsOf(again), origin) });
    expect(ok.status).to.equal(303);
    expect((await jar.get("/dashboard/passkeys")).status).to.equal(200);
  });

  it("hostile: an answer whose signed client data names an origin holding NUL is a 403 page, never a 5xx, for adding and signing in", async () => {
    const { jar, key } = await ownerWithPasskey();
    const forged = "https://evil.example\u0000";
    const add = await (await jar.get("/dashboard/passkeys/add")).text();
    const added = await jar.post("/dashboard/passkeys/add", {
      ...formFields(add, "/dashboard/passkeys/add"),
      name: "forged",
      response: softPasskey().create(passkeyOptionsOf(add), forged),
    });
    expect(added.status).to.equal(403);
    const signin = createJar(stack.url);
    const page = await (await signin.get("/signin/passkey")).text();
    const refused = await signin.post("/signin/passkey", { ...formFields(page, "/signin/passkey"), response: key.get(passkeyOptionsOf(page), forged) });
    expect(refused.status).to.equal(403);
    expect(await refused.text()).to.include("signing in with a passkey did not work");
    expect((await signin.get("/dashboard/passkeys")).status).to.equal(303);
  });

  it("passkey ceremonies begun in two tabs of one browser: the first still finishes, and both step-ups do", async () => {
    const { jar: owner, key } = await ownerWithPasskey();
    const jar = createJar(stack.url);
    const first = await (await jar.get("/signin/passkey?return_to=%2Fdashboard%2Fpasskeys")).text();
    await jar.get("/signin/passkey?return_to=%2Fdashboard%2Fagents");
    expect([...jar.cookies.keys()].filter((name) => name.startsWith("vg_passkey.")).length).to.equal(2);
    const firstDone = await jar.post("/signin/passkey", { ...formFields(first, "/signin/passkey"), response: key.get(passkeyOptionsOf(first), origin) });
    expect(firstDone.status).to.equal(303);
    expect(firstDone.headers.get("location")).to.equal("/dashboard/passkeys");
    // A step-up keeps the session (and its forms): two tabs' step-ups each finish, in either order.
    const a = await (await owner.get("/stepup/passkey?return_to=%2Fdashboard%2Fmoney")).text();
    const b = await (await owner.get("/stepup/passkey?return_to=%2Fdashboard%2Fagents")).text();
    const bDone = await owner.post("/stepup/passkey", { ...formFields(b, "/stepup/passkey"), response: key.get(passkeyOptionsOf(b), origin) });
    expect(bDone.headers.get("location")).to.equal("/dashboard/agents");
    const aDone = await owner.post("/stepup/passkey", { ...formFields(a, "/stepup/passkey"), response: key.get(passkeyOptionsOf(a), origin) });
    expect(aDone.headers.get("location")).to.equal("/dashboard/money");
    expect([...owner.cookies.keys()].filter((name) => name.startsWith("vg_passkey"))).to.deep.equal([]);
    // At most 4 under way: a 5th start ends the others, so a browser's cookies stay few; the newest finishes.
    let page = "";
    for (let i = 1; i <= 9; i++) {
      page = await (await owner.get("/stepup/passkey?return_to=%2Fdashboard%2Fmoney")).text();
      expect([...owner.cookies.keys()].filter((name) => name.startsWith("vg_passkey")).length, `after start ${i}`).to.be.at.most(4);
    }
    const newest = await owner.post("/stepup/passkey", { ...formFields(page, "/stepup/passkey"), response: key.get(passkeyOptionsOf(page), origin) });
    expect(newest.headers.get("location")).to.equal("/dashboard/money");
  });

  describe("a step-up that goes stale between the page's check and core's", () => {
    let racing: FastifyInstance;
    let raceUrl: string;
    /** When set, the next GetSession answer (the page's check) is followed by the step-up's expiry. */
    let staleAfterCheck = false;
    before(async () => {
      const expire: Interceptor = (next) => async (req) => {
        const res = await next(req);
        if (staleAfterCheck && req.method.name === "GetSession") {
          staleAfterCheck = false;
          stack.clock.advance(601_000);
        }
        return res;
      };
      const urls = { issuer: stack.issuer, baseUrl: stack.issuer, authUrl: stack.issuer, appUrl: stack.issuer, mcpUrl: stack.mcpUrl };
      const transport = createInProcessTransport(stack.core.routes, [expire, ...stack.core.interceptors]);
      racing = await buildGateway({
        clients: createCoreClients(transport, { gatewayToken: stack.gatewayToken }),
        logger: stack.logs.logger,
        urls,
        signinMethods: ["email", "passkey"],
      });
      await racing.listen({ port: 0, host: "127.0.0.1" });
      raceUrl = `http://127.0.0.1:${(racing.server.address() as { port: number }).port}`;
    });
    after(async () => {
      await racing?.close();
    });

    it("removing a passkey goes through the step-up page, not a refusal page; nothing is removed until then", async () => {
      const { jar, email } = await ownerWithPasskey();
      const list = await (await jar.get("/dashboard/passkeys")).text();
      const action = /action="(\/dashboard\/passkeys\/[0-9a-f-]{36}\/remove)"/.exec(list)![1]!;
      staleAfterCheck = true;
      const gate = await jar.post(`${raceUrl}${action}`, formFields(list, action));
      expect(staleAfterCheck, "the page checked the session").to.equal(false);
      expect(gate.status).to.equal(303);
      expect(gate.headers.get("location")).to.equal("/stepup?return_to=%2Fdashboard%2Fpasskeys");
      expect(await (await jar.get("/dashboard/passkeys")).text()).to.include("work laptop");
      await stepUp(stack, jar, email, gate.headers.get("location")!);
      const removed = await jar.post(`${raceUrl}${action}`, formFields(await (await jar.get("/dashboard/passkeys")).text(), action));
      expect(removed.headers.get("location")).to.equal("/dashboard/passkeys");
      expect(await (await jar.get("/dashboard/passkeys")).text()).to.not.include("work laptop");
    });

    it("opening Add a passkey goes through the step-up page too", async () => {
      const { jar } = await ownerWithPasskey();
      staleAfterCheck = true;
      const gate = await jar.get(`${raceUrl}/dashboard/passkeys/add`);
      expect(staleAfterCheck, "the page checked the session").to.equal(false);
      expect(gate.status).to.equal(303);
      expect(gate.headers.get("location")).to.equal("/stepup?return_to=%2Fdashboard%2Fpasskeys%2Fadd");
    });
  });

  describe("on a server that does not offer passkeys (the default sign-in methods)", () => {
    let plain: TestStack;
    before(async () => {
      plain = await startStack({ gateway: true, scrypt: { N: 1024, r: 8, p: 1 } });
    });
    after(async () => {
      await plain?.close();
    });

    it("no page links to Passkeys; the page says they are not enabled, and adding one is that 404 before any step-up", async () => {
      const user = await createUser(plain);
      const jar = createJar(plain.url);
      await signIn(plain, jar, user.email);
      for (const path of ["/dashboard/agents", "/dashboard/money", "/dashboard/passkeys"]) {
        const page = await (await jar.get(path)).text();
        expect(page, path).to.include("Your money</a>");
        expect(page, path).to.not.include('href="/dashboard/passkeys"');
      }
      const list = await jar.get("/dashboard/passkeys");
      expect(list.status).to.equal(200);
      const text = await list.text();
      expect(text).to.include("Passkeys are not enabled on this server.");
      expect(text).to.not.include("/dashboard/passkeys/add");
      expect(text).to.not.include("You have no passkeys yet");
      for (let round = 0; round < 2; round++) {
        const add = await jar.get("/dashboard/passkeys/add");
        expect(add.status).to.equal(404);
        expect(await add.text()).to.include("Passkeys are not enabled on this server.");
        // Stepped up or not, the same answer.
        if (round === 0) await stepUp(plain, jar, user.email, "/stepup?return_to=%2Fdashboard%2Fpasskeys");
      }
      const posted = await jar.post("/dashboard/passkeys/add", { ...formFields(text, "/signout"), response: "{}" });
      expect(posted.status).to.equal(404);
      expect(await posted.text()).to.include("Passkeys are not enabled on this server.");
    });

    it("passkeys added while they were offered are listed, without an Add button, and can be removed", async () => {
      const { email } = await ownerWithPasskey();
      // One database, two clocks: past the first stack's sign-in sends, so the second may send a code.
      plain.clock.set(new Date(stack.clock().getTime() + 60_000));
      const jar = createJar(plain.url);
      await signIn(plain, jar, email, "/dashboard/passkeys");
      const list = await (await jar.get("/dashboard/passkeys")).text();
      expect(list).to.include("Passkeys are not enabled on this server.");
      expect(list).to.include("work laptop");
      expect(list).to.not.include("/dashboard/passkeys/add");
      const action = /action="(\/dashboard\/passkeys\/[0-9a-f-]{36}\/remove)"/.exec(list)![1]!;
      // Removing needs a fresh step-up, here by e-mailed code.
      const gate = await jar.post(action, formFields(list, action));
      await stepUp(plain, jar, email, gate.headers.get("location")!);
      const removed = await jar.post(action, formFields(await (await jar.get("/dashboard/passkeys")).text(), action));
      expect(removed.headers.get("location")).to.equal("/dashboard/passkeys");
      const after = await (await jar.get("/dashboard/passkeys")).text();
      expect(after).to.include("The passkey was removed.");
      expect(after).to.not.include("work laptop");
    });
  });
});
