import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, formFields, latestCode, pkce, postForm, registerClient, signIn } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";

const REDIRECT = "http://127.0.0.1:9/callback";

describe("web pages: sign-in, dashboard, revoke, kill switch", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const verifyAgent = (accessToken: string) => stack.clients.grants.verifyAgentToken({ accessToken });

  async function grant(user: { email: string; vaultId: string }, jar = createJar(stack.url), clientName = "Budget bot") {
    const client = (await registerClient(stack, { client_name: clientName })).body;
    const p = pkce();
    const back = await authorize(stack, jar, user.email, {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: p.challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      resource: `urn:vaultgate:vault:${user.vaultId}`,
      state: "s",
    });
    const token = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "authorization_code",
      code: back.searchParams.get("code")!,
      redirect_uri: REDIRECT,
      code_verifier: p.verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
    });
    return { jar, client, token: token.body as { access_token: string; jti: string } };
  }

  it("sends signed-out visitors to sign-in, and sign-in lands on the dashboard", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const res = await jar.get("/dashboard/agents");
    expect(res.status).to.equal(303);
    expect(res.headers.get("location")).to.equal("/signin?return_to=%2Fdashboard%2Fagents");
    const done = await signIn(stack, jar, user.email);
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
    const dash = await jar.get("/dashboard/agents");
    expect(dash.status).to.equal(200);
    const text = await dash.text();
    expect(text).to.include(user.email);
    expect(text).to.include("Pending approvals");
    expect(text).to.include('name="viewport"');
    expect(dash.headers.get("x-frame-options")).to.equal("DENY");
    expect(text).to.not.include("<script");
  });

  it("signing in again in the same browser ends the session it held, whoever it belonged to", async () => {
    const [first, second] = [await createUser(stack), await createUser(stack)];
    const jar = createJar(stack.url);
    const sessionOf = () => jar.cookies.get("vg_session")!;
    await signIn(stack, jar, first.email);
    const firstToken = sessionOf();
    await signIn(stack, jar, first.email);
    const again = sessionOf();
    expect(again).to.not.equal(firstToken);
    await signIn(stack, jar, second.email);
    await expectRefused(stack.clients.grants.getSession({ sessionToken: firstToken }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.grants.getSession({ sessionToken: again }), Reason.INVALID_TOKEN);
    expect((await stack.clients.grants.getSession({ sessionToken: sessionOf() })).session!.userId).to.equal(second.userId);
  });

  it("stores OTPs hashed, allows 5 attempts, and never logs the code", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const form = formFields(await (await jar.get("/signin")).text(), "/signin");
    const sent = await jar.post("/signin", { ...form, email: user.email });
    const codeFields = formFields(await (await jar.get(sent.headers.get("location")!)).text(), "/signin/code");
    const code = await latestCode(stack, user.email);
    const { rows } = await stack.core.db.raw(`SELECT code_hash FROM signin_challenges WHERE id = ?`, [codeFields.challenge]);
    expect(rows[0].code_hash).to.match(/^[0-9a-f]{64}$/);
    const wrong = code === "000000" ? "111111" : "000000";
    for (let i = 0; i < 5; i++) expect((await jar.post("/signin/code", { ...codeFields, code: wrong })).status).to.equal(400);
    const late = await jar.post("/signin/code", { ...codeFields, code });
    expect(late.status).to.equal(400);
    expect(jar.cookies.has("vg_session")).to.equal(false);
    expect(stack.logs.text()).to.not.match(new RegExp(`\\b${code}\\b`));
  });

  it("a one-time code expires after 10 minutes", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const form = formFields(await (await jar.get("/signin")).text(), "/signin");
    const sent = await jar.post("/signin", { ...form, email: user.email });
    const codeFields = formFields(await (await jar.get(sent.headers.get("location")!)).text(), "/signin/code");
    stack.clock.advance(10 * 60_000 + 1000);
    const res = await jar.post("/signin/code", { ...codeFields, code: await latestCode(stack, user.email) });
    expect(res.status).to.equal(400);
    expect(jar.cookies.has("vg_session")).to.equal(false);
  });

  it("a step-up counts for 10 minutes, then sensitive scopes need another", async () => {
    const user = await createUser(stack);
    const client = (await registerClient(stack)).body;
    const jar = createJar(stack.url);
    const q = {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: pkce().challenge,
      code_challenge_method: "S256",
      scope: "payments:initiate",
      resource: `urn:vaultgate:vault:${user.vaultId}`,
      state: "s",
    };
    const back = await authorize(stack, jar, user.email, q);
    expect(back.searchParams.get("code")).to.be.a("string");
    const fresh = await jar.get(`/oauth2/authorize?${new URLSearchParams(q)}`);
    expect(fresh.status).to.equal(200);
    stack.clock.advance(10 * 60_000 + 1000);
    const stale = await jar.get(`/oauth2/authorize?${new URLSearchParams(q)}`);
    expect(stale.status).to.equal(303);
    expect(stale.headers.get("location")).to.match(/^\/stepup\?/);
  });

  it("an unknown e-mail gets the same answer and no message", async () => {
    const jar = createJar(stack.url);
    const form = formFields(await (await jar.get("/signin")).text(), "/signin");
    const sent = await jar.post("/signin", { ...form, email: "nobody-here@example.com" });
    expect(sent.status).to.equal(303);
    expect(sent.headers.get("location")).to.match(/^\/signin\/code\?challenge=/);
    const { messages } = await stack.admin.grants.listOutbox({ email: "nobody-here@example.com" });
    expect(messages).to.have.length(0);
  });

  it("an e-mail address with a control character is refused at sign-in and by the operator's user creation", async () => {
    const email = "ada\u001b]0;owned\u0007@example.com";
    const jar = createJar(stack.url);
    const form = formFields(await (await jar.get("/signin")).text(), "/signin");
    const sent = await jar.post("/signin", { ...form, email });
    expect(sent.status).to.equal(400);
    expect(await sent.text()).to.include("Enter a valid e-mail address.");
    await expectRefused(stack.admin.partners.createUser({ email }), Reason.INVALID_REQUEST);
  });

  it("never redirects sign-in to another origin", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const done = await signIn(stack, jar, user.email, "//evil.example/x");
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
  });

  it("signs in to the dashboard when return_to holds a character no Location header can carry", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const done = await signIn(stack, jar, user.email, "/dashboard/agents/\u0100");
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);
  });

  it("revokes a grant from the agent page, and the next verification refuses it", async () => {
    const user = await createUser(stack);
    const { jar, token } = await grant(user);
    const list = await (await jar.get("/dashboard/agents")).text();
    const agentPath = /href="(\/dashboard\/agents\/[0-9a-f-]{36})"/.exec(list)![1]!;
    const agentPage = await (await jar.get(agentPath)).text();
    expect(agentPage).to.include(token.jti);
    expect(agentPage).to.include("See the balance of the vault");
    const action = `${agentPath}/grants/${token.jti}/revoke`;
    // Without the CSRF token nothing happens.
    expect((await jar.post(action, { csrf: "nope" })).status).to.equal(403);
    expect((await verifyAgent(token.access_token)).grant).to.not.equal(undefined);
    const res = await jar.post(action, formFields(agentPage, action));
    expect(res.status).to.equal(303);
    await expectRefused(verifyAgent(token.access_token), Reason.INVALID_TOKEN, /revoked/);
    const after = await (await jar.get(res.headers.get("location")!)).text();
    expect(after).to.include("The grant was revoked");
  });

  it("hostile: a revoke address pairing one agent with another agent's grant revokes nothing; the notice shows only where it is true", async () => {
    const user = await createUser(stack);
    const a = await grant(user, createJar(stack.url), "Agent A");
    const b = await grant(user, a.jar, "Agent B");
    const list = await (await a.jar.get("/dashboard/agents")).text();
    const paths = [...list.matchAll(/href="(\/dashboard\/agents\/[0-9a-f-]{36})"/g)].map((m) => m[1]!);
    const pages = await Promise.all(paths.map(async (p) => (await a.jar.get(p)).text()));
    const pathA = paths[pages.findIndex((t) => t.includes(a.token.jti))]!;
    const pathB = paths[pages.findIndex((t) => t.includes(b.token.jti))]!;
    expect(pathA).to.not.equal(pathB);
    const fields = formFields(await (await a.jar.get(pathA)).text(), `${pathA}/grants/${a.token.jti}/revoke`);
    const res = await a.jar.post(`${pathA}/grants/${b.token.jti}/revoke`, fields);
    expect(res.status).to.equal(404);
    expect(await res.text()).to.include("There is no such grant.");
    expect((await verifyAgent(b.token.access_token)).grant).to.not.equal(undefined);
    // Revoked from its own page (its address in upper case), the notice names B and shows on B's page only.
    const upper = (path: string) => path.replace(/[0-9a-f-]{36}$/, (id) => id.toUpperCase());
    const done = await a.jar.post(`${upper(pathB)}/grants/${b.token.jti.toUpperCase()}/revoke`, fields);
    expect(done.headers.get("location")).to.equal(pathB);
    await expectRefused(verifyAgent(b.token.access_token), Reason.INVALID_TOKEN, /revoked/);
    const notice = a.jar.cookies.get("vg_notice")!;
    expect(notice).to.match(new RegExp(`^revoked\\.${pathB.slice(-36)}\\.[\\w-]{43}$`));
    expect(await (await a.jar.get(pathA)).text()).to.not.include("was revoked");
    a.jar.cookies.set("vg_notice", notice);
    expect(await (await a.jar.get(pathB)).text()).to.include("The grant was revoked");
    for (const path of [`${pathB}?revoked=${b.token.jti}`, `${pathA}?revoked=${a.token.jti}`, `${pathB}?done=revoked`]) {
      expect(await (await a.jar.get(path)).text(), path).to.not.include("was revoked");
    }
    expect((await verifyAgent(a.token.access_token)).grant).to.not.equal(undefined);
  });

  it("another user cannot see or revoke someone else's agent", async () => {
    const owner = await createUser(stack);
    const { jar, token } = await grant(owner);
    const agentPath = /href="(\/dashboard\/agents\/[0-9a-f-]{36})"/.exec(await (await jar.get("/dashboard/agents")).text())![1]!;
    const intruder = await createUser(stack);
    const other = createJar(stack.url);
    await signIn(stack, other, intruder.email);
    expect((await other.get(agentPath)).status).to.equal(404);
    const dash = await (await other.get("/dashboard/agents")).text();
    const res = await other.post(`${agentPath}/grants/${token.jti}/revoke`, formFields(dash, "/dashboard/kill-switch"));
    expect(res.status).to.equal(404);
    expect((await verifyAgent(token.access_token)).grant).to.not.equal(undefined);
  });

  it("signed in, a planted vg_csrf cookie cannot authorize a form", async () => {
    const user = await createUser(stack);
    const { jar, token } = await grant(user);
    jar.cookies.set("vg_csrf", "A".repeat(43));
    const res = await jar.post("/dashboard/kill-switch", { csrf: "A".repeat(43) });
    expect(res.status).to.equal(403);
    expect((await verifyAgent(token.access_token)).grant).to.not.equal(undefined);
  });

  it("the kill switch revokes every grant of the user", async () => {
    const user = await createUser(stack);
    const a = await grant(user);
    const b = await grant(user, a.jar, "Second bot");
    const dash = await (await a.jar.get("/dashboard/agents")).text();
    const res = await a.jar.post("/dashboard/kill-switch", formFields(dash, "/dashboard/kill-switch"));
    expect(res.status).to.equal(303);
    await expectRefused(verifyAgent(a.token.access_token), Reason.INVALID_TOKEN, /revoked/);
    await expectRefused(verifyAgent(b.token.access_token), Reason.INVALID_TOKEN, /revoked/);
  });

  it("escapes every value: a hostile client name renders as text", async () => {
    const user = await createUser(stack);
    const { jar } = await grant(user, createJar(stack.url), `<img src=x onerror=alert(1)>"'`);
    const text = await (await jar.get("/dashboard/agents")).text();
    expect(text).to.not.include("<img src=x");
    expect(text).to.include("&lt;img src=x onerror=alert(1)&gt;&quot;&#39;");
  });

  it("a notice cookie names only the page's own notices: Object's members and junk show nothing", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    for (const path of ["/dashboard/agents", "/dashboard/money", "/dashboard/passkeys"]) {
      for (const value of ["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf", "revoked.x", "%3Cb%3E", "killed".repeat(20)]) {
        jar.cookies.set("vg_notice", value);
        const res = await jar.get(path);
        expect(res.status, value).to.equal(200);
        const text = await res.text();
        expect(text, `${path} ${value}`).to.not.include('class="card ok"');
        expect(text, `${path} ${value}`).to.not.match(/\[object Object\]|native code|<b>/);
        expect(jar.cookies.has("vg_notice"), "read once, whatever it held").to.equal(false);
      }
    }
  });

  it("tampered parameters give a clear page, never a stack trace", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    for (const path of [
      "/dashboard/agents/not-a-uuid",
      "/dashboard/agents/00000000-0000-4000-8000-000000000000",
      "/oauth2/authorize?client_id=%ff",
      "/oauth2/authorize",
    ]) {
      const res = await jar.get(path);
      expect(res.status, path).to.be.oneOf([400, 404]);
      const text = await res.text();
      expect(text, path).to.match(/^<!doctype html>/);
      expect(text, path).to.not.match(/Error:|\.ts:\d+/);
    }
    const bad = await jar.request("/dashboard/kill-switch", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "csrf=%zz",
    });
    expect(bad.status).to.equal(400);
    // Larger than any form of ours: a page that says so, not one saying it could not be read.
    const huge = await jar.request("/signin", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `email=${"a".repeat(17 * 1024)}`,
    });
    expect(huge.status).to.equal(413);
    expect(await huge.text())
      .to.match(/^<!doctype html>/)
      .and.include("This form is too large");
  });
});
