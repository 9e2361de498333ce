import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import { testDatabase, requirePostgres } from "../../support/db.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { createCapturedLogger } from "../../support/logs.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";
import { createAuditStore } from "../../../core/audit/store.js";
import { createOidcSignin, type OidcSignin, type OidcProviderSettings } from "../../../core/identity/oidc.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { sha256Hex } from "../../../lib/crypto.js";
import type { Db } from "../../../core/db/knex.js";

const REDIRECT = "http://app.vaultgate.test/signin/oidc/callback";

describe("sign-in through a company's OpenID Connect provider", () => {
  let db: Db;
  let idp: TestIdp;
  let n = 0;

  before(async function () {
    this.timeout(180_000);
    db = (await testDatabase()).db;
    idp = await startIdp({ redirectUris: [REDIRECT] });
  });
  after(async () => {
    await idp?.stop();
  });
  afterEach(async () => {
    await idp.tamper("none");
    await idp.setDown(false);
    await idp.setLogin({ acr: "urn:idp:pwd", amr: ["pwd"] });
  });

  function oidc(extra: Partial<OidcProviderSettings> = {}, issuer = idp.issuer): OidcSignin {
    return createOidcSignin({
      db,
      audit: createAuditStore(db),
      clock: () => new Date(),
      logger: createCapturedLogger().logger,
      provider: { issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, stepUpAcr: [], ...extra },
      redirectUri: REDIRECT,
      sessionTtlMs: 3600_000,
    });
  }

  /** A user of ours and the provider's account for the same person. */
  async function person(verified = true) {
    const email = `oidc-${randomBytes(5).toString("hex")}@example.test`;
    const userId = randomUUID();
    await db("users").insert({ id: userId, email, status: "active", created_at: new Date() });
    const sub = `emp-${++n}-${randomBytes(3).toString("hex")}`;
    await idp.addAccount({ sub, email, email_verified: verified });
    return { email, userId, sub };
  }

  const facts = () => ({ requestId: randomUUID(), clientAddress: "192.0.2.7" });

  const sessionsOf = async (userId: string) => (await db("web_sessions").where({ user_id: userId })).length;
  const failures = async (requestId: string) => db("audit_records").where({ request_id: requestId, outcome: "failure" });

  it("sends the browser to the provider with PKCE S256, state and nonce, and signs the person in from the ID token", async () => {
    const signin = oidc();
    const p = await person();
    const flow = await signin.start("sign_in");
    const url = new URL(flow.authorizationUrl);
    expect(url.origin).to.equal(idp.issuer);
    expect(url.searchParams.get("code_challenge_method")).to.equal("S256");
    expect(url.searchParams.get("state")).to.have.length.greaterThan(20);
    expect(url.searchParams.get("nonce")).to.have.length.greaterThan(20);
    expect(url.searchParams.get("redirect_uri")).to.equal(REDIRECT);
    expect(url.searchParams.get("scope")).to.equal("openid email");
    expect(url.searchParams.has("max_age")).to.equal(false);
    const callback = await idp.signIn(flow.authorizationUrl, p.sub);
    const done = await signin.complete({ callbackUrl: callback, binding: flow.binding }, facts());
    expect(done.purpose).to.equal("sign_in");
    expect(done.userId).to.equal(p.userId);
    const token = done.purpose === "sign_in" ? done.sessionToken : "";
    expect(
      await db("web_sessions")
        .where({ token_hash: sha256Hex(token) })
        .first(),
    ).to.include({ user_id: p.userId });
    expect(await db("identity_links").where({ issuer: idp.issuer, subject: p.sub }).first()).to.include({ user_id: p.userId });
  });

  it("once linked, matches the person by issuer and subject, whatever e-mail the provider reports later", async () => {
    const signin = oidc();
    const p = await person();
    const first = await signin.start("sign_in");
    await signin.complete({ callbackUrl: await idp.signIn(first.authorizationUrl, p.sub), binding: first.binding }, facts());
    // The provider now reports another person's address, unverified: the link decides.
    const other = await person();
    await idp.addAccount({ sub: p.sub, email: other.email, email_verified: false });
    const again = await signin.start("sign_in");
    const done = await signin.complete({ callbackUrl: await idp.signIn(again.authorizationUrl, p.sub), binding: again.binding }, facts());
    expect(done.userId).to.equal(p.userId);
  });

  it("refuses a first sign-in whose e-mail is not verified: audited, no link, no session", async () => {
    const signin = oidc();
    const p = await person(false);
    const flow = await signin.start("sign_in");
    const f = facts();
    await expectRefused(
      signin.complete({ callbackUrl: await idp.signIn(flow.authorizationUrl, p.sub), binding: flow.binding }, f),
      Reason.ACCESS_DENIED,
      /start again from the sign-in page/,
    );
    expect((await failures(f.requestId)).map((r) => r.reason)).to.deep.equal(["first sign-in without a verified e-mail address"]);
    expect(await db("identity_links").where({ subject: p.sub })).to.have.length(0);
    expect(await sessionsOf(p.userId)).to.equal(0);
  });

  it("refuses a verified address that has no account here", async () => {
    const signin = oidc();
    const sub = `stranger-${randomBytes(3).toString("hex")}`;
    await idp.addAccount({ sub, email: `${sub}@example.test`, email_verified: true });
    const flow = await signin.start("sign_in");
    await expectRefused(signin.complete({ callbackUrl: await idp.signIn(flow.authorizationUrl, sub), binding: flow.binding }, facts()), Reason.ACCESS_DENIED);
    expect(await db("identity_links").where({ subject: sub })).to.have.length(0);
  });

  const tampered = {
    issuer: "issuer is wrong",
    audience: "audience is wrong",
    nonce: "nonce is wrong",
    signature: "signature is wrong",
    expired: "expiry has passed",
    "future-iat": "iat is in the future",
    "foreign-azp": "azp names another client",
  } as const;
  for (const mode of Object.keys(tampered) as (keyof typeof tampered)[]) {
    it(`refuses an ID token whose ${tampered[mode]}: audited, no session`, async () => {
      const signin = oidc();
      const p = await person();
      const flow = await signin.start("sign_in");
      const callback = await idp.signIn(flow.authorizationUrl, p.sub);
      await idp.tamper(mode);
      const f = facts();
      await expectRefused(signin.complete({ callbackUrl: callback, binding: flow.binding }, f), Reason.ACCESS_DENIED);
      const rows = await failures(f.requestId);
      expect(rows).to.have.length(1);
      expect(rows[0].action).to.equal("web.oidc.sign_in");
      expect(rows[0].reason).to.match(/^ID token or response invalid/);
      expect(await sessionsOf(p.userId)).to.equal(0);
      expect(await db("identity_links").where({ subject: p.sub })).to.have.length(0);
    });
  }

  it("refuses a replayed callback (the same state twice), and one brought by another browser", async () => {
    const signin = oidc();
    const p = await person();
    const flow = await signin.start("sign_in");
    const callback = await idp.signIn(flow.authorizationUrl, p.sub);
    // A browser without the flow's cookie (or with another flow's) cannot complete it.
    const stranger = await signin.start("sign_in");
    await expectRefused(signin.complete({ callbackUrl: callback, binding: stranger.binding }, facts()), Reason.ACCESS_DENIED);
    await expectRefused(signin.complete({ callbackUrl: callback, binding: "" }, facts()), Reason.ACCESS_DENIED);
    // The stranger's flow was consumed by its failed attempt; ours still works once.
    await signin.complete({ callbackUrl: callback, binding: flow.binding }, facts());
    const f = facts();
    await expectRefused(signin.complete({ callbackUrl: callback, binding: flow.binding }, f), Reason.ACCESS_DENIED, /already used or has expired/);
    expect(await failures(f.requestId)).to.have.length(1);
    expect(await sessionsOf(p.userId)).to.equal(1);
  });

  it("provider down or discovery failing: PROVIDER_UNAVAILABLE, and no flow is created", async () => {
    const before = Number((await db("signin_flows").count<{ n: number }[]>({ n: "*" }).first())!.n);
    await idp.setDown(true);
    await expectRefused(oidc().start("sign_in"), Reason.PROVIDER_UNAVAILABLE, /cannot be reached/);
    // Nothing listening at all.
    await expectRefused(oidc({}, "http://127.0.0.1:9").start("sign_in"), Reason.PROVIDER_UNAVAILABLE);
    expect(Number((await db("signin_flows").count<{ n: number }[]>({ n: "*" }).first())!.n)).to.equal(before);
    // Back up: the same instance discovers afresh.
    await idp.setDown(false);
    const signin = oidc();
    await idp.setDown(true);
    await expectRefused(signin.start("sign_in"), Reason.PROVIDER_UNAVAILABLE);
    await idp.setDown(false);
    expect((await signin.start("sign_in")).authorizationUrl).to.match(/^http:\/\/127\.0\.0\.1/);
  });

  describe("step-up", () => {
    async function signedIn(signin: OidcSignin) {
      const p = await person();
      const flow = await signin.start("sign_in");
      const done = await signin.complete({ callbackUrl: await idp.signIn(flow.authorizationUrl, p.sub), binding: flow.binding }, facts());
      const token = done.purpose === "sign_in" ? done.sessionToken : "";
      const row = await db("web_sessions")
        .where({ token_hash: sha256Hex(token) })
        .first();
      return { ...p, session: { sessionId: String(row.id), userId: p.userId } };
    }
    const stepUpAt = async (sessionId: string) => (await db("web_sessions").where({ id: sessionId }).first()).step_up_at;

    it("asks for a fresh authentication with the configured acr, and counts when acr meets it", async () => {
      const signin = oidc({ stepUpAcr: ["urn:idp:mfa"] });
      const p = await signedIn(signin);
      const flow = await signin.start("step_up", p.session);
      const url = new URL(flow.authorizationUrl);
      expect(url.searchParams.get("max_age")).to.equal("0");
      expect(url.searchParams.get("prompt")).to.equal("login");
      expect(url.searchParams.get("acr_values")).to.equal("urn:idp:mfa");
      await idp.setLogin({ acr: "urn:idp:mfa", amr: ["pwd", "otp"] });
      const done = await signin.complete({ callbackUrl: await idp.signIn(flow.authorizationUrl, p.sub), binding: flow.binding, session: p.session }, facts());
      expect(done.purpose).to.equal("step_up");
      expect(await stepUpAt(p.session.sessionId)).to.be.instanceOf(Date);
    });

    it("an amr value named in OIDC_STEP_UP_ACR also meets it", async () => {
      const signin = oidc({ stepUpAcr: ["mfa"] });
      const p = await signedIn(signin);
      const flow = await signin.start("step_up", p.session);
      await idp.setLogin({ acr: "urn:idp:pwd", amr: ["pwd", "mfa"] });
      await signin.complete({ callbackUrl: await idp.signIn(flow.authorizationUrl, p.sub), binding: flow.binding, session: p.session }, facts());
      expect(await stepUpAt(p.session.sessionId)).to.be.instanceOf(Date);
    });

    it("refuses a step-up whose acr/amr is below the requirement, a stale auth_time, or another person", async () => {
      const signin = oidc({ stepUpAcr: ["urn:idp:mfa"] });
      const p = await signedIn(signin);
      const weak = await signin.start("step_up", p.session);
      const f = facts();
      await expectRefused(
        signin.complete({ callbackUrl: await idp.signIn(weak.authorizationUrl, p.sub), binding: weak.binding, session: p.session }, f),
        Reason.ACCESS_DENIED,
      );
      expect((await failures(f.requestId)).map((r) => r.reason)).to.deep.equal(["acr/amr below the step-up requirement"]);

      await idp.setLogin({ acr: "urn:idp:mfa", amr: ["otp"] });
      const stale = await signin.start("step_up", p.session);
      const staleCallback = await idp.signIn(stale.authorizationUrl, p.sub);
      await idp.tamper("stale-auth-time");
      const g = facts();
      await expectRefused(signin.complete({ callbackUrl: staleCallback, binding: stale.binding, session: p.session }, g), Reason.ACCESS_DENIED);
      expect((await failures(g.requestId)).map((r) => r.reason)).to.deep.equal(["auth_time is not fresh"]);
      await idp.tamper("none");

      // The provider signs in somebody else (also linked here): not this session's person.
      const other = await signedIn(signin);
      const swap = await signin.start("step_up", p.session);
      const h = facts();
      await expectRefused(
        signin.complete({ callbackUrl: await idp.signIn(swap.authorizationUrl, other.sub), binding: swap.binding, session: p.session }, h),
        Reason.ACCESS_DENIED,
      );
      expect((await failures(h.requestId)).map((r) => r.reason)).to.deep.equal(["the provider signed in someone else"]);
      // Somebody not linked yet, whose verified address is their own account's: not linked to this person either.
      const stranger = await person();
      const unlinked = await signin.start("step_up", p.session);
      const u = facts();
      await expectRefused(
        signin.complete({ callbackUrl: await idp.signIn(unlinked.authorizationUrl, stranger.sub), binding: unlinked.binding, session: p.session }, u),
        Reason.ACCESS_DENIED,
      );
      expect((await failures(u.requestId)).map((r) => r.reason)).to.deep.equal(["the provider signed in someone else"]);
      expect(await db("identity_links").where({ subject: stranger.sub })).to.have.length(0);

      // A step-up flow completed from another session.
      const theirs = await signin.start("step_up", p.session);
      await expectRefused(
        signin.complete({ callbackUrl: await idp.signIn(theirs.authorizationUrl, p.sub), binding: theirs.binding, session: other.session }, facts()),
        Reason.ACCESS_DENIED,
      );
      expect(await stepUpAt(p.session.sessionId)).to.equal(null);
    });
  });

  describe("on PostgreSQL", () => {
    before(function () {
      requirePostgres(this, "concurrent callbacks need several connections");
    });

    it("one callback replayed many times at once signs in once", async () => {
      const signin = oidc();
      const p = await person();
      const flow = await signin.start("sign_in");
      const callback = await idp.signIn(flow.authorizationUrl, p.sub);
      const results = await Promise.allSettled(Array.from({ length: 12 }, () => signin.complete({ callbackUrl: callback, binding: flow.binding }, facts())));
      expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
      for (const r of results) if (r.status === "rejected") expect(reasonOf(r.reason)).to.equal(Reason.ACCESS_DENIED);
      expect(await sessionsOf(p.userId)).to.equal(1);
    });

    it("many first sign-ins of the same person at once link once, to that person", async () => {
      const signin = oidc();
      const p = await person();
      const flows = await Promise.all(Array.from({ length: 8 }, () => signin.start("sign_in")));
      const callbacks = await Promise.all(flows.map((f) => idp.signIn(f.authorizationUrl, p.sub)));
      const done = await Promise.all(flows.map((f, i) => signin.complete({ callbackUrl: callbacks[i]!, binding: f.binding }, facts())));
      expect(new Set(done.map((d) => d.userId))).to.deep.equal(new Set([p.userId]));
      expect(await db("identity_links").where({ subject: p.sub })).to.have.length(1);
      expect(await sessionsOf(p.userId)).to.equal(8);
    });

    it("many first sign-ins of different subjects with one verified address at once: one links, the rest are refused", async () => {
      const signin = oidc();
      const p = await person();
      const subs = [p.sub, ...Array.from({ length: 7 }, (_, i) => `${p.sub}-other-${i}`)];
      for (const sub of subs.slice(1)) await idp.addAccount({ sub, email: p.email, email_verified: true });
      const flows = await Promise.all(subs.map(() => signin.start("sign_in")));
      const callbacks = await Promise.all(flows.map((f, i) => idp.signIn(f.authorizationUrl, subs[i]!)));
      const results = await Promise.allSettled(flows.map((f, i) => signin.complete({ callbackUrl: callbacks[i]!, binding: f.binding }, facts())));
      expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
      for (const r of results) if (r.status === "rejected") expect(reasonOf(r.reason)).to.equal(Reason.ACCESS_DENIED);
      expect(await db("identity_links").where({ user_id: p.userId })).to.have.length(1);
      expect(await sessionsOf(p.userId)).to.equal(1);
    });
    it("an unlinked person's step-ups by many subjects with their verified address at once: one links and counts, the rest are refused", async () => {
      const signin = oidc();
      const p = await person();
      const sessionId = randomUUID();
      await db("web_sessions").insert({
        id: sessionId,
        token_hash: sha256Hex(randomUUID()),
        user_id: p.userId,
        created_at: new Date(),
        expires_at: new Date(Date.now() + 3600_000),
      });
      const session = { sessionId, userId: p.userId };
      const subs = [p.sub, ...Array.from({ length: 7 }, (_, i) => `${p.sub}-up-${i}`)];
      for (const sub of subs.slice(1)) await idp.addAccount({ sub, email: p.email, email_verified: true });
      const flows = await Promise.all(subs.map(() => signin.start("step_up", session)));
      const callbacks = await Promise.all(flows.map((f, i) => idp.signIn(f.authorizationUrl, subs[i]!)));
      const results = await Promise.allSettled(flows.map((f, i) => signin.complete({ callbackUrl: callbacks[i]!, binding: f.binding, session }, facts())));
      expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
      for (const r of results) if (r.status === "rejected") expect(reasonOf(r.reason)).to.equal(Reason.ACCESS_DENIED);
      expect(await db("identity_links").where({ user_id: p.userId })).to.have.length(1);
      expect((await db("web_sessions").where({ id: sessionId }).first()).step_up_at).to.be.instanceOf(Date);
    });
  });
});
