import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createUser } from "../../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { expectRefused } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import { lockWaits } from "../../support/lock-waits.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

const APP = "http://app.vaultgate.test";

/** The provider sign-in RPCs through core's generated clients, against node-oidc-provider in its own process. */
describe("GrantsService provider sign-in RPCs", () => {
  let stack: TestStack;
  let idp: TestIdp;
  before(async function () {
    this.timeout(180_000);
    idp = await startIdp({ redirectUris: [`${APP}/signin/oidc/callback`] });
    stack = await startStack({ appUrl: APP, oidc: { issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret, stepUpAcr: ["urn:idp:mfa"] } });
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
  });

  it("signs in, then steps up with the provider's mfa; a replayed callback is refused", async () => {
    const user = await createUser(stack);
    const sub = `rpc-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const start = await stack.clients.grants.startProviderSignIn({});
    expect(new URL(start.authorizationUrl).searchParams.get("redirect_uri")).to.equal(`${APP}/signin/oidc/callback`);
    const callback = await idp.signIn(start.authorizationUrl, sub);
    const done = await stack.clients.grants.completeProviderSignIn({ callbackUrl: callback, flowSecret: start.flowSecret });
    expect(done.sessionToken).to.match(/^vgs_/);
    const session = (await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!;
    expect(session.userId).to.equal(user.userId);
    expect(session.stepUpFresh).to.equal(false);
    await expectRefused(
      stack.clients.grants.completeProviderSignIn({ callbackUrl: callback, flowSecret: start.flowSecret }),
      Reason.ACCESS_DENIED,
      /already used or has expired/,
    );

    const up = await stack.clients.grants.startProviderSignIn({ sessionToken: done.sessionToken });
    expect(new URL(up.authorizationUrl).searchParams.get("max_age")).to.equal("0");
    await idp.setLogin({ acr: "urn:idp:mfa", amr: ["pwd", "otp"] });
    try {
      const upCallback = await idp.signIn(up.authorizationUrl, sub);
      await stack.clients.grants.completeProviderSignIn({ callbackUrl: upCallback, flowSecret: up.flowSecret, sessionToken: done.sessionToken });
    } finally {
      await idp.setLogin({ acr: "urn:idp:pwd", amr: ["pwd"] });
    }
    expect((await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!.stepUpFresh).to.equal(true);
  });

  it("finds a user stored under an earlier spelling of the provider's address, the most exact spelling first", async () => {
    const signInAs = async (email: string) => {
      const sub = `spell-${randomUUID().slice(0, 8)}`;
      await idp.addAccount({ sub, email, email_verified: true });
      const start = await stack.clients.grants.startProviderSignIn({});
      const done = await stack.clients.grants.completeProviderSignIn({
        callbackUrl: await idp.signIn(start.authorizationUrl, sub),
        flowSecret: start.flowSecret,
      });
      return (await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!.userId;
    };
    const legacyUser = async (email: string) => {
      const id = randomUUID();
      await stack.core.db("users").insert({ id, email, status: "active", created_at: new Date() });
      return id;
    };
    // Stored before the current address rule, which refuses it.
    const broken = `a..${randomUUID().slice(0, 8)}@example.com`;
    const brokenUser = await legacyUser(broken);
    expect(await signInAs(broken.toUpperCase())).to.equal(brokenUser);
    // The same mailbox in two spellings, two users (the upgrade left the older row alone): each finds its own.
    const local = `spell-${randomUUID().slice(0, 8)}`;
    const ascii = await legacyUser(`${local}@xn--bcher-kva.de`);
    const unicode = await legacyUser(`${local}@bücher.de`);
    expect(await signInAs(`${local}@XN--BCHER-KVA.DE`)).to.equal(ascii);
    expect(await signInAs(`${local}@BÜCHER.de`)).to.equal(unicode);
  });

  it("PostgreSQL only: a sign-in that read the user just before a deactivation committed is refused, not revived by a reactivation", async function () {
    requirePostgres(this, "a sign-in held mid-way needs a second connection");
    const user = await createUser(stack);
    const sub = `race-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const start = await stack.clients.grants.startProviderSignIn({});
    const callbackUrl = await idp.signIn(start.authorizationUrl, sub);
    // The deactivation waits on the user row first, then the sign-in, which has read the user active.
    const hold = await stack.core.db.transaction();
    await hold.raw(`SELECT 1 FROM users WHERE id = ? FOR UPDATE`, [user.userId]);
    const deactivated = stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
    await lockWaits(stack.core.db, "users", 1);
    // Checked from the start: its refusal arrives while the test awaits the deactivation.
    const completed = expectRefused(stack.clients.grants.completeProviderSignIn({ callbackUrl, flowSecret: start.flowSecret }), Reason.ACCESS_DENIED);
    await lockWaits(stack.core.db, "users", 2);
    await hold.commit();
    await deactivated;
    await completed;
    await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "active" });
    expect(await stack.core.db("web_sessions").where({ user_id: user.userId }).whereNull("ended_at")).to.have.length(0);
  });

  it("a provider sign-in ends the session the browser held before and marks the browser", async () => {
    const user = await createUser(stack);
    const sub = `rpc-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const signIn = async (replacesSessionToken = "") => {
      const start = await stack.clients.grants.startProviderSignIn({});
      const callbackUrl = await idp.signIn(start.authorizationUrl, sub);
      const done = await stack.clients.grants.completeProviderSignIn({ callbackUrl, flowSecret: start.flowSecret, replacesSessionToken });
      // The browser is marked as known to the person, for code sign-in budgets.
      expect(done.browserToken).to.match(/^vgb_/);
      return done.sessionToken;
    };
    const old = await signIn();
    const next = await signIn(old);
    await expectRefused(stack.clients.grants.getSession({ sessionToken: old }), Reason.INVALID_TOKEN);
    expect((await stack.clients.grants.getSession({ sessionToken: next })).session!.userId).to.equal(user.userId);
  });

  it("a hostile caller: a step-up flow completed with another person's session is refused", async () => {
    const a = await createUser(stack);
    const b = await createUser(stack);
    const tokens: string[] = [];
    for (const u of [a, b]) {
      const sub = `rpc-${u.userId.slice(0, 8)}`;
      await idp.addAccount({ sub, email: u.email, email_verified: true });
      const s = await stack.clients.grants.startProviderSignIn({});
      tokens.push(
        (await stack.clients.grants.completeProviderSignIn({ callbackUrl: await idp.signIn(s.authorizationUrl, sub), flowSecret: s.flowSecret })).sessionToken,
      );
    }
    await idp.setLogin({ acr: "urn:idp:mfa", amr: ["otp"] });
    try {
      const up = await stack.clients.grants.startProviderSignIn({ sessionToken: tokens[0]! });
      const cb = await idp.signIn(up.authorizationUrl, `rpc-${a.userId.slice(0, 8)}`);
      await expectRefused(
        stack.clients.grants.completeProviderSignIn({ callbackUrl: cb, flowSecret: up.flowSecret, sessionToken: tokens[1]! }),
        Reason.ACCESS_DENIED,
      );
    } finally {
      await idp.setLogin({ acr: "urn:idp:pwd", amr: ["pwd"] });
    }
    for (const t of tokens) expect((await stack.clients.grants.getSession({ sessionToken: t })).session!.stepUpFresh).to.equal(false);
  });

  it("hostile: a callback address that is no URL is bad input, not a provider outage, and spends no flow", async () => {
    const user = await createUser(stack);
    const sub = `rpc-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const start = await stack.clients.grants.startProviderSignIn({});
    for (const callbackUrl of ["", "not a url", "/signin/oidc/callback?code=x&state=y"]) {
      await expectRefused(stack.clients.grants.completeProviderSignIn({ callbackUrl, flowSecret: start.flowSecret }), Reason.INVALID_REQUEST);
    }
    const callback = await idp.signIn(start.authorizationUrl, sub);
    const done = await stack.clients.grants.completeProviderSignIn({ callbackUrl: callback, flowSecret: start.flowSecret });
    expect((await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!.userId).to.equal(user.userId);
  });

  it("hostile: a callback whose error parameter holds NUL or a control character is refused, not an internal error", async () => {
    for (const error of ["%00", "denied%1B%5B31m", "%ED%A0%80"]) {
      const start = await stack.clients.grants.startProviderSignIn({});
      const state = new URL(start.authorizationUrl).searchParams.get("state")!;
      const callbackUrl = `${APP}/signin/oidc/callback?error=${error}&state=${state}&iss=${encodeURIComponent(idp.issuer)}`;
      await expectRefused(stack.clients.grants.completeProviderSignIn({ callbackUrl, flowSecret: start.flowSecret }), Reason.ACCESS_DENIED, /did not work/);
    }
    const audited = await stack.core.db("audit_records").where({ action: "web.oidc.sign_in", outcome: "failure" }).whereLike("reason", "provider answered %");
    expect(audited.map((r: { reason: string }) => r.reason)).to.include.members(["provider answered ?", "provider answered denied?[31m"]);
  });

  it("provider down at the callback: unavailable (503 on pages), no session created", async () => {
    const user = await createUser(stack);
    const sub = `rpc-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const start = await stack.clients.grants.startProviderSignIn({});
    const callback = await idp.signIn(start.authorizationUrl, sub);
    await idp.setDown(true);
    try {
      await expectRefused(stack.clients.grants.completeProviderSignIn({ callbackUrl: callback, flowSecret: start.flowSecret }), Reason.PROVIDER_UNAVAILABLE);
    } finally {
      await idp.setDown(false);
    }
    expect(await stack.core.db("web_sessions").where({ user_id: user.userId })).to.have.length(0);
  });
});
