import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields } from "../../support/agent-oauth.js";
import { startSmtpServer, codeIn, type TestSmtpServer } from "../../support/smtp.js";
import { expectRefused } from "../../support/refusals.js";
import { testDatabase } from "../../support/db.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * With SMTP configured, the sign-in code and the account notices reach a real mail server
 * (the test's), through the mail outbox; nothing is left in the dev outbox.
 */
describe("web pages: sign-in codes and notices by SMTP", () => {
  let stack: TestStack;
  let smtp: TestSmtpServer;
  before(async function () {
    this.timeout(180_000);
    smtp = await startSmtpServer();
    stack = await startStack({ gateway: true, smtp: { url: smtp.url, from: "Vaultgate <no-reply@vaultgate.test>" }, mailPollMs: 0 });
  });
  after(async () => {
    await stack?.close();
    await smtp?.close();
  });

  it("says at startup that mail goes by SMTP", () => {
    expect(stack.logs.text()).to.include("mail: sign-in codes and notices are sent by SMTP through 127.0.0.1:");
  });

  it("signs in with the code read from the SMTP server; the kill switch notice follows by mail", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
    const sent = await jar.post("/signin", { ...fields, email: user.email });
    expect(sent.status).to.equal(303);
    const codeFields = formFields(await (await jar.get(sent.headers.get("location")!)).text(), "/signin/code");
    // Other suites' undelivered mail may share the database's outbox: count this user's only.
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email)).to.have.length(1);
    const [mail] = smtp.to(user.email);
    expect(mail?.subject).to.match(/^Your Vaultgate code: \d{6}$/);
    // The dev outbox holds nothing: the code went to the mail server only.
    expect((await stack.admin.grants.listOutbox({ email: user.email })).messages).to.have.length(0);
    const done = await jar.post("/signin/code", { ...codeFields, code: codeIn(mail!) });
    expect(done.status).to.equal(303);
    const dashboard = await jar.get("/dashboard/agents");
    expect(dashboard.status).to.equal(200);
    const kill = formFields(await dashboard.text(), "/dashboard/kill-switch");
    expect((await jar.post("/dashboard/kill-switch", kill)).status).to.equal(303);
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email).map((m) => m.subject)).to.deep.equal([mail!.subject, "Vaultgate: the kill switch was used"]);
  });

  it("hostile: an address mail would deliver to another mailbox is nobody's: refused at creation and sign-in, nothing sent there", async () => {
    // Each reads, to a mail library, as a list or a display name with attacker@evil.test in it.
    for (const email of ["victim,attacker@evil.test", "victim;attacker@evil.test", "x<attacker@evil.test>.test", "attacker@evil.test:victim.test"]) {
      await expectRefused(stack.admin.partners.createUser({ email }), Reason.INVALID_REQUEST, /e-mail address/);
      const jar = createJar(stack.url);
      const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
      const sent = await jar.post("/signin", { ...fields, email });
      expect(sent.status, email).to.equal(400);
      expect(await sent.text()).to.include("Enter a valid e-mail address.");
    }
    // An honest address (plus and dots included) still gets its code.
    const honest = `first.last+vault-${Date.now()}@example.com`;
    await stack.admin.partners.createUser({ email: honest });
    const jar = createJar(stack.url);
    const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
    expect((await jar.post("/signin", { ...fields, email: honest })).status).to.equal(303);
    await stack.core.mail!.runOnce();
    expect(smtp.to(honest)).to.have.length(1);
    expect(smtp.to("attacker@evil.test")).to.have.length(0);
  });

  it("hostile: an account stored with such an address before they were refused gets its notices at no other mailbox", async () => {
    const user = await createUser(stack);
    const legacy = `${user.userId.slice(0, 8)},attacker@evil.test`;
    await (await testDatabase()).db("users").where({ id: user.userId }).update({ email: legacy });
    const { token } = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] });
    await stack.clients.grants.revokeAllGrants({ accessToken: token!.accessToken, reason: "suspicious" });
    await stack.core.mail!.runOnce();
    expect(smtp.to("attacker@evil.test")).to.have.length(0);
  });

  it("a mail server refusing for a while delays the code; it arrives once the server accepts", async () => {
    const user = await createUser(stack);
    let accepting = false;
    smtp.setAnswer(() => (accepting ? { accept: true } : { accept: false, code: 421 }));
    try {
      const jar = createJar(stack.url);
      const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
      expect((await jar.post("/signin", { ...fields, email: user.email })).status).to.equal(303);
      await stack.core.mail!.runOnce();
      expect(smtp.to(user.email)).to.have.length(0);
      accepting = true;
      // Back within the code's 10 minutes: a code the outage outlives is dropped (signin-smtp-expiry.test.ts).
      stack.clock.advance(5 * 60_000);
      await stack.core.mail!.runOnce();
      expect(smtp.to(user.email)).to.have.length(1);
    } finally {
      smtp.setAnswer(() => ({ accept: true }));
    }
  });

  it("an agent pulling the kill switch: the owner is told by mail", async () => {
    const user = await createUser(stack);
    const { token } = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] });
    const res = await stack.clients.grants.revokeAllGrants({ accessToken: token!.accessToken, reason: "suspicious" });
    expect(res.revoked).to.be.greaterThan(0);
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email).map((m) => m.subject)).to.deep.equal(["Vaultgate: the kill switch was used"]);
    expect(smtp.to(user.email)[0]!.text).to.include("An agent used the kill switch");
  });

  it("ten wrong codes: the lockout notice is sent by mail", async () => {
    const user = await createUser(stack);
    for (let i = 0; i < 10; i++) {
      stack.clock.advance(31_000);
      const { challengeId } = await stack.clients.grants.startSignIn({ email: user.email });
      await stack.core.mail!.runOnce();
      const right = codeIn(smtp.to(user.email).at(-1)!);
      await stack.clients.grants.completeSignIn({ challengeId, code: right === "000000" ? "000001" : "000000" }).catch(() => {});
    }
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email).map((m) => m.subject)).to.include("Vaultgate: code sign-in paused");
  });
});
