import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createUser } from "../../support/agent-oauth.js";
import { startSmtpServer, codeIn, type TestSmtpServer } from "../../support/smtp.js";
import { requirePostgres } from "../../support/db.js";
import { lockWaits } from "../../support/lock-waits.js";

/**
 * An operator's change to an account, with mail sent by SMTP (the test's server): code mails still
 * queued for the user are dropped in the change's transaction; notices still reach their address.
 */
describe("account changes and the mail outbox", () => {
  let stack: TestStack;
  let smtp: TestSmtpServer;
  before(async function () {
    this.timeout(180_000);
    smtp = await startSmtpServer();
    stack = await startStack({ webhookPollMs: 0, smtp: { url: smtp.url, from: "Vaultgate <no-reply@vaultgate.test>" }, mailPollMs: 0 });
  });
  after(async () => {
    await stack?.close();
    await smtp?.close();
  });

  /** Sends what is due; other suites' mail may share the database's outbox, so tests count their own addresses only. */
  const sendMail = async () => {
    for (let pass = 0; pass < 20 && (await stack.core.mail!.runOnce()) > 0; pass++);
  };
  /** The kill switch's notice to the owner, queued and not yet sent. */
  const queueNotice = async (user: Awaited<ReturnType<typeof createUser>>) => {
    const { token } = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] });
    await stack.clients.grants.revokeAllGrants({ accessToken: token!.accessToken, reason: "suspicious" });
  };
  const NOTICE = "Vaultgate: the kill switch was used";

  it("a changed address: the queued code to the old one is not sent, the notice is; the new address gets working codes", async () => {
    const user = await createUser(stack);
    await stack.clients.grants.startSignIn({ email: user.email });
    await queueNotice(user);
    const next = `moved-${randomUUID().slice(0, 8)}@example.com`;
    await stack.admin.partnerResources.setUserEmail({ userId: user.userId, email: next });
    await sendMail();
    expect(smtp.to(user.email).map((m) => m.subject)).to.deep.equal([NOTICE]);

    const started = await stack.clients.grants.startSignIn({ email: next });
    await sendMail();
    const [mail] = smtp.to(next);
    const done = await stack.clients.grants.completeSignIn({ challengeId: started.challengeId, code: codeIn(mail!) });
    expect((await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!.userId).to.equal(user.userId);
  });

  it("a deactivation: the queued code is not sent, the notice is; reactivated, a new code arrives and works", async () => {
    const user = await createUser(stack);
    await stack.clients.grants.startSignIn({ email: user.email });
    await queueNotice(user);
    await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
    await sendMail();
    expect(smtp.to(user.email).map((m) => m.subject)).to.deep.equal([NOTICE]);

    await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "active" });
    stack.clock.advance(31_000);
    const started = await stack.clients.grants.startSignIn({ email: user.email });
    await sendMail();
    const code = codeIn(smtp.to(user.email).at(-1)!);
    const done = await stack.clients.grants.completeSignIn({ challengeId: started.challengeId, code });
    expect(done.sessionToken).to.match(/^vgs_/);
  });

  it("PostgreSQL only: a code asked for just before the change commits is not sent, whichever change it was", async function () {
    requirePostgres(this, "a sign-in held mid-way needs a second connection");
    for (const change of ["deactivate", "new address"] as const) {
      const user = await createUser(stack);
      // The sign-in has read the user and waits on its send limit's row, which this transaction holds.
      const hold = await stack.core.db.transaction();
      await hold.raw(`INSERT INTO rate_limit_logs (key, hits, allowed, expires_at) VALUES (?, '{}', true, now() + interval '1 hour')`, [
        `otp-send-gap:sign_in:${user.email}`,
      ]);
      const started = stack.clients.grants.startSignIn({ email: user.email });
      await lockWaits(stack.core.db, "rate_limit_logs");
      if (change === "deactivate") await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
      else await stack.admin.partnerResources.setUserEmail({ userId: user.userId, email: `moved-${randomUUID().slice(0, 8)}@example.com` });
      await hold.commit();
      await started;
      if (change === "deactivate") await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "active" });
      await sendMail();
      expect(smtp.to(user.email), change).to.have.length(0);
    }
  });

  it("another user's queued code is not touched", async () => {
    const [a, b] = [await createUser(stack), await createUser(stack)];
    await stack.clients.grants.startSignIn({ email: b.email });
    await stack.admin.partnerResources.setUserStatus({ userId: a.userId, status: "inactive" });
    await sendMail();
    expect(smtp.to(b.email).map((m) => m.subject)).to.have.length(1);
  });
});
