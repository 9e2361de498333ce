import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import { testDatabase, requirePostgres } from "../../support/db.js";
import { requireChromium } from "../../support/browser.js";
import { launchWebAuthnBrowser, type WebAuthnBrowser, type WebAuthnPageScope } from "../../support/webauthn.js";
import { createCapturedLogger } from "../../support/logs.js";
import { startSmtpServer } from "../../support/smtp.js";
import { expectRefused } from "../../support/refusals.js";
import { createAuditStore } from "../../../core/audit/store.js";
import { createPasskeys, type PasskeySession } from "../../../core/identity/passkeys.js";
import { relyingParty } from "../../../core/identity/relying-party.js";
import { createMailer } from "../../../core/identity/mail/mailer.js";
import { createMailWorker } from "../../../core/identity/mail/worker.js";
import { createSmtpTransport } from "../../../core/identity/mail/transport.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { sha256Hex } from "../../../lib/crypto.js";
import type { Db } from "../../../core/db/knex.js";

describe("passkeys (WebAuthn) with Chromium's virtual authenticator", () => {
  let db: Db;
  let browser: WebAuthnBrowser;

  before(async function () {
    this.timeout(180_000);
    requireChromium(this);
    db = (await testDatabase()).db;
  });
  beforeEach(async function () {
    this.timeout(60_000);
    browser = await launchWebAuthnBrowser();
  });
  afterEach(async () => {
    await browser?.close();
  });

  const passkeys = (appUrl = browser.origin, mailer?: ReturnType<typeof createMailer>) =>
    createPasskeys({ db, audit: createAuditStore(db), clock: () => new Date(), logger: createCapturedLogger().logger, appUrl, sessionTtlMs: 3600_000, mailer });
  const facts = () => ({ requestId: randomUUID(), clientAddress: "192.0.2.9" });

  /** A user with a live web session that passed step-up just now. */
  async function owner(): Promise<PasskeySession> {
    const userId = randomUUID();
    const email = `pk-${randomBytes(5).toString("hex")}@example.test`;
    await db("users").insert({ id: userId, email, status: "active", created_at: new Date() });
    const sessionId = randomUUID();
    await db("web_sessions").insert({
      id: sessionId,
      token_hash: sha256Hex(randomUUID()),
      user_id: userId,
      created_at: new Date(),
      expires_at: new Date(Date.now() + 3600_000),
      step_up_at: new Date(),
    });
    return { sessionId, userId, email, stepUpFresh: true };
  }

  async function registered(pk = passkeys(), who?: PasskeySession) {
    const s = who ?? (await owner());
    const { options, binding } = await pk.registrationOptions(s);
    const response = await browser.create(options);
    const record = await pk.register({ binding, response, name: "Laptop", session: s }, facts());
    return { s, record };
  }

  it("derives the RP ID and origin from APP_URL", () => {
    expect(relyingParty("https://app.example.com/dashboard")).to.deep.equal({ origin: "https://app.example.com", rpId: "app.example.com" });
  });

  it("registers a passkey after a fresh step-up, with user verification, flags and counter stored; the owner is told by mail", async () => {
    const smtp = await startSmtpServer();
    try {
      const key = randomBytes(32);
      const mailer = createMailer({ db, signinCodeKey: key, smtp: { url: smtp.url, from: "no-reply@vaultgate.test" } });
      const pk = passkeys(browser.origin, mailer);
      const s = await owner();
      const { options } = await pk.registrationOptions(s);
      expect(options.rp.id).to.equal("localhost");
      expect(options.authenticatorSelection?.userVerification).to.equal("required");
      const { record } = await registered(pk, s);
      const row = await db("passkeys").where({ id: record.id }).first();
      expect(row).to.include({ user_id: s.userId, rp_id: "localhost", device_type: record.deviceType, backed_up: record.backedUp, name: "Laptop" });
      expect(Number(row.counter)).to.be.at.least(0);
      expect((await pk.list(s.userId)).map((k) => k.id)).to.deep.equal([record.id]);
      await createMailWorker({
        outbox: mailer.outbox!,
        transport: createSmtpTransport({ url: smtp.url, from: "no-reply@vaultgate.test" }),
        clock: () => new Date(),
        logger: createCapturedLogger().logger,
        pollMs: 0,
      }).runOnce();
      expect(smtp.to(s.email).map((m) => m.subject)).to.deep.equal(["Vaultgate: a passkey was added to your account"]);
    } finally {
      await smtp.close();
    }
  });

  it("refuses to register without a fresh step-up", async () => {
    const s = await owner();
    await expectRefused(passkeys().registrationOptions({ ...s, stepUpFresh: false }), Reason.ACCESS_DENIED);
    // Options fetched while fresh, completed after it lapsed.
    const pk = passkeys();
    const { options, binding } = await pk.registrationOptions(s);
    const response = await browser.create(options);
    await expectRefused(pk.register({ binding, response, name: "x", session: { ...s, stepUpFresh: false } }, facts()), Reason.ACCESS_DENIED);
    expect(await pk.list(s.userId)).to.have.length(0);
  });

  it("a passkey assertion with user verification signs in and counts as step-up", async () => {
    const pk = passkeys();
    const { s } = await registered(pk);
    await db("web_sessions").where({ id: s.sessionId }).update({ step_up_at: null });
    const up = await pk.authenticationOptions("step_up", s);
    expect(up.options.userVerification).to.equal("required");
    expect(up.options.allowCredentials).to.have.length(1);
    const done = await pk.authenticate({ binding: up.binding, response: await browser.get(up.options), session: s }, facts());
    expect(done.purpose).to.equal("step_up");
    expect((await db("web_sessions").where({ id: s.sessionId }).first()).step_up_at).to.be.instanceOf(Date);
    const signIn = await pk.authenticationOptions("sign_in");
    const result = await pk.authenticate({ binding: signIn.binding, response: await browser.get(signIn.options) }, facts());
    expect(result.userId).to.equal(s.userId);
    const token = result.purpose === "sign_in" ? result.sessionToken : "";
    expect(
      await db("web_sessions")
        .where({ token_hash: sha256Hex(token) })
        .first(),
    ).to.include({ user_id: s.userId });
  });

  it("refuses an assertion without user verification", async () => {
    const pk = passkeys();
    const { s } = await registered(pk);
    await browser.setUserVerified(false);
    const up = await pk.authenticationOptions("step_up", s);
    // The authenticator answers, without the verified-user flag.
    const response = await browser.page.evaluate(
      async (o) => (globalThis as WebAuthnPageScope).SimpleWebAuthnBrowser.startAuthentication({ optionsJSON: { ...o, userVerification: "discouraged" } }),
      up.options,
    );
    await db("web_sessions").where({ id: s.sessionId }).update({ step_up_at: null });
    await expectRefused(pk.authenticate({ binding: up.binding, response, session: s }, facts()), Reason.ACCESS_DENIED);
    expect((await db("web_sessions").where({ id: s.sessionId }).first()).step_up_at).to.equal(null);
  });

  it("refuses a response for another challenge, another origin or another RP ID, and a replayed one", async () => {
    const pk = passkeys();
    const { s } = await registered(pk);
    const first = await pk.authenticationOptions("step_up", s);
    const second = await pk.authenticationOptions("step_up", s);
    const answerToFirst = await browser.get(first.options);
    // Brought with the second challenge's cookie: the challenge does not match.
    const f = facts();
    await expectRefused(pk.authenticate({ binding: second.binding, response: answerToFirst, session: s }, f), Reason.ACCESS_DENIED);
    expect((await db("audit_records").where({ request_id: f.requestId }).first()).reason).to.match(/^assertion invalid: .*challenge/i);
    // Same RP ID, another origin (a look-alike site on another port).
    const otherOrigin = passkeys(browser.origin.replace(/:\d+$/, ":1"));
    const o = await otherOrigin.authenticationOptions("step_up", s);
    const g = facts();
    await expectRefused(otherOrigin.authenticate({ binding: o.binding, response: await browser.get(o.options), session: s }, g), Reason.ACCESS_DENIED);
    expect((await db("audit_records").where({ request_id: g.requestId }).first()).reason).to.match(/origin/i);
    // Another RP ID: the credential is not one of that relying party's.
    const otherRp = passkeys(browser.origin.replace("localhost", "vaultgate.localhost"));
    await expectRefused(otherRp.authenticationOptions("step_up", s), Reason.ACCESS_DENIED);
    // The right answer once; the same answer again finds its challenge used.
    const third = await pk.authenticationOptions("step_up", s);
    const answer = await browser.get(third.options);
    await pk.authenticate({ binding: third.binding, response: answer, session: s }, facts());
    await expectRefused(pk.authenticate({ binding: third.binding, response: answer, session: s }, facts()), Reason.ACCESS_DENIED);
  });

  it("a hostile signed-in person cannot step up with another person's passkey, nor remove it", async () => {
    const pk = passkeys();
    const victim = await registered(pk);
    const attacker = await registered(pk);
    await db("web_sessions").where({ id: attacker.s.sessionId }).update({ step_up_at: null });
    // The attacker's own step-up challenge, answered with the victim's credential.
    const up = await pk.authenticationOptions("step_up", attacker.s);
    const victimCredential = (await db("passkeys").where({ id: victim.record.id }).first()).credential_id;
    const answer = await browser.get({ ...up.options, allowCredentials: [{ id: victimCredential, type: "public-key" }] });
    const f = facts();
    await expectRefused(pk.authenticate({ binding: up.binding, response: answer, session: attacker.s }, f), Reason.ACCESS_DENIED);
    expect((await db("audit_records").where({ request_id: f.requestId }).first()).reason).to.equal("another person's passkey");
    expect((await db("web_sessions").where({ id: attacker.s.sessionId }).first()).step_up_at).to.equal(null);
    await expectRefused(pk.remove({ ...attacker.s, stepUpFresh: true }, victim.record.id, facts()), Reason.NOT_FOUND);
    expect(await pk.list(victim.s.userId)).to.have.length(1);
    await pk.remove(victim.s, victim.record.id, facts());
    expect(await pk.list(victim.s.userId)).to.have.length(0);
  });

  it("refuses and audits a cloned authenticator (its counter went back)", async () => {
    const pk = passkeys();
    const { s, record } = await registered(pk);
    for (let i = 0; i < 2; i++) {
      const up = await pk.authenticationOptions("step_up", s);
      await pk.authenticate({ binding: up.binding, response: await browser.get(up.options), session: s }, facts());
    }
    const stored = Number((await db("passkeys").where({ id: record.id }).first()).counter);
    expect(stored).to.be.greaterThan(0);
    await browser.rewindCounter(0);
    const up = await pk.authenticationOptions("step_up", s);
    const f = facts();
    await expectRefused(pk.authenticate({ binding: up.binding, response: await browser.get(up.options), session: s }, f), Reason.ACCESS_DENIED);
    const rows = await db("audit_records").where({ request_id: f.requestId }).orderBy("seq");
    expect(rows.map((r) => r.action)).to.deep.equal(["passkey.clone_suspected", "web.passkey.step_up"]);
    expect(Number((await db("passkeys").where({ id: record.id }).first()).counter)).to.equal(stored);
  });

  describe("on PostgreSQL", () => {
    before(function () {
      requirePostgres(this, "concurrent assertions need several connections");
    });

    it("one assertion presented many times at once counts once", async () => {
      const pk = passkeys();
      const { s } = await registered(pk);
      const up = await pk.authenticationOptions("sign_in");
      const answer = await browser.get(up.options);
      const results = await Promise.allSettled(Array.from({ length: 12 }, () => pk.authenticate({ binding: up.binding, response: answer }, facts())));
      expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
      expect(await db("web_sessions").where({ user_id: s.userId })).to.have.length(2);
    });
  });
});
