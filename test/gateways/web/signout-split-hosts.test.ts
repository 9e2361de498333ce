import { request as httpRequest } from "node:http";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn, type Jar } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";
import { decodeJwt, fixtures, forgeWithFreshKey, resignWithRealKey, type TestUser } from "../../support/trust.js";

/**
 * APP_URL (127.0.0.1), AUTH_URL (localhost) and BASE_URL (127.0.0.2) on one gateway, each host
 * with its own session cookie (one jar per host, as a browser keeps host-only cookies): signing
 * out on one host ends the same person's session on the others, and nothing else.
 */
describe("sign-out in a split deployment (AUTH_URL on another host than APP_URL)", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let app: string;
  let auth: string;
  let third: string;

  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, authHost: "localhost", baseHost: "127.0.0.2", scrypt: { N: 1024, r: 8, p: 1 } });
    app = stack.url;
    auth = app.replace("127.0.0.1", "localhost");
    third = app.replace("127.0.0.1", "127.0.0.2");
  });
  after(() => stack?.close());

  /** A GET with headers fetch would not send as given (Host), answering its status and Location. */
  const rawGet = (url: string, headers: Record<string, string>) =>
    new Promise<{ status: number; location: string | undefined }>((resolve, reject) => {
      const req = httpRequest(url, { headers }, (res) => {
        res.resume();
        resolve({ status: res.statusCode!, location: res.headers.location });
      });
      req.on("error", reject).end();
    });
  const getSession = (sessionToken: string) => stack.clients.grants.getSession({ sessionToken });
  const configuredSignIns = () => [`${app}/signin`, `${auth}/signin`, `${third}/signin`, "/signin"];

  /** A jar signed in on `base` as `as` (a new user when none), with its session token and sign-out form. */
  async function signedIn(base: string, as?: TestUser) {
    const jar = createJar(base);
    const user = as ?? (await createUser(stack));
    await signIn(stack, jar, user.email);
    const form = formFields(await (await jar.get("/dashboard/agents")).text(), "/signout");
    return { jar, user, email: user.email, token: jar.cookies.get("vg_session")!, form };
  }

  /** Signs out in `jar`: the redirect to the other host's continue path, with its handoff. */
  async function signOut(jar: Jar, form: Record<string, string | string[]>, otherBase: string) {
    const out = await jar.post("/signout", form);
    expect(out.status).to.equal(303);
    const location = new URL(out.headers.get("location")!, "http://relative.invalid");
    expect(location.origin + location.pathname).to.equal(`${otherBase}/signout/continue`);
    return { location: location.toString(), handoff: location.searchParams.get("handoff")! };
  }

  for (const [name, from, to] of [
    ["on APP_URL's host ends the session on AUTH_URL's host", () => app, () => auth],
    ["on AUTH_URL's host ends the session on APP_URL's host", () => auth, () => app],
  ] as const) {
    it(`signing out ${name}, then lands on sign-in where it began`, async () => {
      const here = await signedIn(from());
      stack.clock.advance(31_000);
      const there = await signedIn(to(), here.user);
      const { location } = await signOut(here.jar, here.form, to());
      await expectRefused(getSession(here.token), Reason.INVALID_TOKEN);

      const back = await there.jar.get(location);
      expect([back.status, back.headers.get("location")]).to.deep.equal([303, `${from()}/signin`]);
      expect(back.headers.getSetCookie()).to.include("vg_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0");
      await expectRefused(getSession(there.token), Reason.INVALID_TOKEN);
      expect((await there.jar.get("/dashboard/agents")).headers.get("location")).to.match(/^\/signin\?/);
    });
  }

  it("signing out on BASE_URL's host (a third) ends the sessions on APP_URL's and AUTH_URL's hosts in turn, then lands on its sign-in", async () => {
    const here = await signedIn(third);
    stack.clock.advance(31_000);
    const onApp = await signedIn(app, here.user);
    stack.clock.advance(31_000);
    const onAuth = await signedIn(auth, here.user);
    const { location } = await signOut(here.jar, here.form, app);
    await expectRefused(getSession(here.token), Reason.INVALID_TOKEN);

    const hop = await onApp.jar.get(location);
    expect(hop.status).to.equal(303);
    const next = new URL(hop.headers.get("location")!);
    expect(next.origin + next.pathname).to.equal(`${auth}/signout/continue`);
    await expectRefused(getSession(onApp.token), Reason.INVALID_TOKEN);

    const back = await onAuth.jar.get(next.toString());
    expect([back.status, back.headers.get("location")]).to.deep.equal([303, `${third}/signin`]);
    await expectRefused(getSession(onAuth.token), Reason.INVALID_TOKEN);
    for (const jar of [here.jar, onApp.jar, onAuth.jar]) expect((await jar.get("/dashboard/agents")).headers.get("location")).to.match(/^\/signin\?/);
  });

  it("a chain passes on through a host where the person is not signed in, and ends nobody else's session there", async () => {
    const here = await signedIn(third);
    stack.clock.advance(31_000);
    const onAuth = await signedIn(auth, here.user);
    const someoneElse = await signedIn(app);
    const { location } = await signOut(here.jar, here.form, app);
    for (const jar of [createJar(app), someoneElse.jar]) {
      const hop = await jar.get(location);
      expect(hop.status).to.equal(303);
      expect(new URL(hop.headers.get("location")!).pathname).to.equal("/signout/continue");
    }
    expect((await getSession(someoneElse.token)).session!.email).to.equal(someoneElse.email);
    const hop = await createJar(app).get(location);
    const back = await onAuth.jar.get(hop.headers.get("location")!);
    expect([back.status, back.headers.get("location")]).to.deep.equal([303, `${third}/signin`]);
    await expectRefused(getSession(onAuth.token), Reason.INVALID_TOKEN);
  });

  it("a sign-out repeated after the session had just ended (a double click, a lost answer) still signs out of the other host", async () => {
    const here = await signedIn(app);
    stack.clock.advance(31_000);
    const there = await signedIn(auth, here.user);
    // The first sign-out ended the session, but its answer never reached the browser.
    await stack.clients.grants.endSession({ sessionToken: here.token });
    stack.clock.advance(9 * 60_000);
    const { location } = await signOut(here.jar, here.form, auth);
    const back = await there.jar.get(location);
    expect([back.status, back.headers.get("location")]).to.deep.equal([303, `${app}/signin`]);
    await expectRefused(getSession(there.token), Reason.INVALID_TOKEN);
  });

  it("a just-ended session serves nothing but a repeated sign-out, even when the end was recorded by a clock running ahead", async () => {
    const here = await signedIn(app);
    await stack.clients.grants.endSession({ sessionToken: here.token });
    // Another replica, 5 s ahead, recorded the end.
    stack.clock.advance(-5_000);
    expect((await here.jar.get("/dashboard/agents")).headers.get("location")).to.match(/^\/signin\?/);
    await expectRefused(getSession(here.token), Reason.INVALID_TOKEN);
    stack.clock.advance(5_000);
  });

  it("a session that ended over ten minutes ago, or expired, hands nothing off: the other host's session stays", async () => {
    // A browser drops the cookie when its session expires: only a copy kept past its life presents one.
    const expired = await signedIn(app);
    stack.clock.advance(11 * 3600_000);
    const expiredThere = await signedIn(auth, expired.user);
    stack.clock.advance(3600_000);
    const ended = await signedIn(app);
    stack.clock.advance(31_000);
    const endedThere = await signedIn(auth, ended.user);
    await stack.clients.grants.endSession({ sessionToken: ended.token });
    stack.clock.advance(10 * 60_000 + 1_000);
    for (const { jar, form } of [expired, ended]) {
      const out = await jar.post("/signout", form);
      expect([out.status, out.headers.get("location")]).to.deep.equal([303, "/signin"]);
    }
    for (const s of [expiredThere, endedThere]) expect((await getSession(s.token)).session!.email).to.equal(s.email);
  });

  it("hostile: a session replaced by a new sign-in, or ended by an e-mail change, hands nothing off even within ten minutes", async () => {
    // Replaced: a copy of the old cookie (someone else's) signs the person out of nothing elsewhere.
    const here = await signedIn(app);
    const copy = createJar(app);
    for (const [name, value] of here.jar.cookies) copy.cookies.set(name, value);
    stack.clock.advance(31_000);
    await signIn(stack, here.jar, here.email);
    stack.clock.advance(31_000);
    const there = await signedIn(auth, here.user);
    // The account changed: the old address's sessions ended, a sign-in at the new one goes on.
    const changed = await signedIn(app);
    const email = `n-${changed.email}`;
    await stack.admin.partnerResources.setUserEmail({ userId: changed.user.userId, email });
    const changedThere = await signedIn(auth, { ...changed.user, email });
    stack.clock.advance(60_000);
    for (const { jar, form } of [{ jar: copy, form: here.form }, changed]) {
      const out = await jar.post("/signout", form);
      expect([out.status, out.headers.get("location")]).to.deep.equal([303, "/signin"]);
    }
    for (const s of [there, changedThere]) expect((await getSession(s.token)).session!.email).to.equal(s.email);
    // The browser's live session still signs out of the other host.
    const { location } = await signOut(here.jar, formFields(await (await here.jar.get("/dashboard/agents")).text(), "/signout"), auth);
    expect((await there.jar.get(location)).headers.get("location")).to.equal(`${app}/signin`);
    await expectRefused(getSession(there.token), Reason.INVALID_TOKEN);
  });

  it("hostile: a handoff core refuses ends the chain at once: back to sign-in where it began, nothing ended", async () => {
    const here = await signedIn(third);
    stack.clock.advance(31_000);
    const onApp = await signedIn(app, here.user);
    const { handoff } = await signOut(here.jar, here.form, app);
    const res = await onApp.jar.get(`/signout/continue?handoff=${encodeURIComponent(forgeWithFreshKey(handoff))}&from=base`);
    expect([res.status, res.headers.get("location")]).to.deep.equal([303, `${third}/signin`]);
    expect((await getSession(onApp.token)).session!.email).to.equal(onApp.email);
  });

  it("hostile: a handoff for X brought by a browser signed in as Y on the other host leaves Y signed in", async () => {
    const x = await signedIn(app);
    const y = await signedIn(auth);
    const { location } = await signOut(x.jar, x.form, auth);
    const res = await y.jar.get(location);
    expect([res.status, res.headers.get("location")]).to.deep.equal([303, `${app}/signin`]);
    expect(res.headers.getSetCookie().some((c) => c.startsWith("vg_session="))).to.equal(false);
    expect((await getSession(y.token)).session!.email).to.equal(y.email);
    expect((await y.jar.get("/dashboard/agents")).status).to.equal(200);
  });

  it("many browsers at once bring one person's handoff: all of that person's sessions end, nobody else's", async () => {
    const f = fixtures(stack);
    const x = await signedIn(app);
    const y = await createUser(stack);
    // One e-mailed code at a time per person: the sessions are made in turn, the requests at once.
    const sessions = async (email: string) => {
      const out: string[] = [];
      for (let i = 0; i < 8; i++) out.push(await f.session({ email }));
      return out;
    };
    const [xs, ys] = [await sessions(x.email), await sessions(y.email)];
    const { location } = await signOut(x.jar, x.form, auth);
    const answers = await Promise.all(
      [...xs, ...ys].map((token) => {
        const jar = createJar(auth);
        jar.cookies.set("vg_session", token);
        return jar.get(location);
      }),
    );
    for (const res of answers) expect([res.status, res.headers.get("location")]).to.deep.equal([303, `${app}/signin`]);
    for (const token of xs) await expectRefused(getSession(token), Reason.INVALID_TOKEN);
    for (const token of ys) expect((await getSession(token)).session!.email).to.equal(y.email);
  });

  it("hostile: forged, expired, foreign, garbage or missing handoffs end nothing and answer no 5xx", async () => {
    const f = fixtures(stack);
    const owner = await signedIn(auth);
    const other = await signedIn(app);
    const { handoff } = await signOut(other.jar, other.form, auth);
    // The owner's own handoff, from another of their sessions, then tampered with.
    const mine = (await stack.clients.grants.endSession({ sessionToken: (await signedIn(app, owner.user)).token })).signoutHandoff;
    const now = Math.floor(stack.clock().getTime() / 1000);
    const issued = decodeJwt(mine).payload.iat as number;
    const bad = [
      "",
      "garbage",
      "a.b.c",
      "x".repeat(5000),
      "%00",
      forgeWithFreshKey(mine),
      resignWithRealKey(stack, mine, { iat: now - 180, exp: now - 120 }),
      resignWithRealKey(stack, mine, {}, { typ: "at+jwt" }),
      resignWithRealKey(stack, mine, { exp: issued + 61 }),
      // An agent access token names its user in `sub` as a handoff does: the owner's own.
      (await f.grant(owner.user, { stepUp: true })).accessToken,
      resignWithRealKey(stack, mine, { iss: "https://evil.example" }),
      resignWithRealKey(stack, handoff, { sub: "not-a-user" }),
    ];
    for (const h of bad) {
      const res = await owner.jar.get(`/signout/continue?handoff=${encodeURIComponent(h)}`);
      expect(res.status, h).to.be.below(500);
      if (res.status === 303) expect(configuredSignIns(), h).to.include(res.headers.get("location"));
      expect((await getSession(owner.token)).session!.email, h).to.equal(owner.email);
    }
    const none = await owner.jar.get("/signout/continue");
    expect([none.status, none.headers.get("location")]).to.deep.equal([303, `${app}/signin`]);
    const twice = await owner.jar.get(`/signout/continue?handoff=${encodeURIComponent(mine)}&handoff=${encodeURIComponent(mine)}`);
    expect(twice.status).to.be.below(500);
    expect((await getSession(owner.token)).session!.email).to.equal(owner.email);

    // The real handoff, once its minute (and the clock skew) has passed, ends nothing either.
    stack.clock.advance(91_000);
    const late = await owner.jar.get(`/signout/continue?handoff=${encodeURIComponent(mine)}`);
    expect([late.status, late.headers.get("location")]).to.deep.equal([303, `${app}/signin`]);
    expect((await getSession(owner.token)).session!.email).to.equal(owner.email);
  });

  it("hostile: the continue path goes only to the configured hosts' sign-in, whatever the request says", async () => {
    const { handoff } = await signOut(...(await signedIn(app).then((s) => [s.jar, s.form] as const)), auth);
    const port = new URL(app).port;
    for (const headers of <Record<string, string>[]>[
      { host: `evil.example:${port}` },
      { host: "evil.example" },
      { "x-forwarded-host": "evil.example" },
      { "x-forwarded-proto": "https" },
    ]) {
      for (const query of [`handoff=${encodeURIComponent(handoff)}&return_to=https://evil.example/`, "return_to=//evil.example", ""]) {
        const res = await rawGet(`${app}/signout/continue?${query}`, headers);
        expect(res.status).to.equal(303);
        expect(configuredSignIns()).to.include(res.location);
      }
    }
    // Whatever `from` says, a chain goes on only to a configured host's continue path or sign-in.
    const configured = new Set([app, auth, third]);
    for (const from of ["base", "mcp", "issuer", "app", "auth", "https://evil.example", "//evil.example", "__proto__", ""]) {
      for (const headers of <Record<string, string>[]>[{}, { host: "evil.example" }, { "x-forwarded-host": "evil.example" }]) {
        const res = await rawGet(`${app}/signout/continue?handoff=${encodeURIComponent(handoff)}&from=${encodeURIComponent(from)}`, headers);
        expect(res.status).to.equal(303);
        const to = new URL(res.location!, "http://relative.invalid");
        if (to.origin !== "http://relative.invalid") expect(configured.has(to.origin), res.location).to.equal(true);
        expect(["/signin", "/signout/continue"]).to.include(to.pathname);
      }
    }
    // No HEAD twin: a link preview or prefetch ends nothing.
    expect((await fetch(`${auth}/signout/continue?handoff=${encodeURIComponent(handoff)}`, { method: "HEAD" })).status).to.equal(405);
  });

  it("hostile: a handoff is no access token, for agents or partners", async () => {
    const { handoff } = await signOut(...(await signedIn(app).then((s) => [s.jar, s.form] as const)), auth);
    const res = await fetch(`${app}/mcp/read`, {
      method: "POST",
      headers: { authorization: `Bearer ${handoff}`, "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "accounts.balance", params: {} }),
    });
    expect(res.status).to.equal(401);
    const partner = await fetch(`${app}/api/partner/events`, { headers: { authorization: `Bearer ${handoff}` } });
    expect(partner.status).to.equal(401);
  });
});

describe("sign-out on BASE_URL's host when APP_URL and AUTH_URL share another", function () {
  this.timeout(60_000);
  let stack: TestStack;

  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, baseHost: "127.0.0.2", scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  it("ends the session on the dashboard's host too, and lands on sign-in where it began", async () => {
    const [app, third] = [stack.url, stack.url.replace("127.0.0.1", "127.0.0.2")];
    const user = await createUser(stack);
    const jars = [createJar(third), createJar(app)];
    for (const jar of jars) {
      await signIn(stack, jar, user.email);
      stack.clock.advance(31_000);
    }
    const tokens = jars.map((jar) => jar.cookies.get("vg_session")!);
    const out = await jars[0]!.post("/signout", formFields(await (await jars[0]!.get("/dashboard/agents")).text(), "/signout"));
    const hop = new URL(out.headers.get("location")!, "http://relative.invalid");
    expect(hop.origin + hop.pathname).to.equal(`${app}/signout/continue`);
    const back = await jars[1]!.get(hop.toString());
    expect([back.status, back.headers.get("location")]).to.deep.equal([303, `${third}/signin`]);
    for (const sessionToken of tokens) await expectRefused(stack.clients.grants.getSession({ sessionToken }), Reason.INVALID_TOKEN);
  });
});
