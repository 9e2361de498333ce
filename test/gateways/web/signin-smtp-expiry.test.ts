import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields } from "../../support/agent-oauth.js";
import { startSmtpServer, codeIn, type TestSmtpServer } from "../../support/smtp.js";

/**
 * A sign-in code held back by a mail outage is dropped once the code has expired (it could no
 * longer be used), while notices queued with it still arrive: an outage loses no notice.
 */
describe("web pages: a code mail outlived by its code is not sent", () => {
  let stack: TestStack;
  let smtp: TestSmtpServer;
  let accepting = true;
  before(async function () {
    this.timeout(180_000);
    smtp = await startSmtpServer({ answer: () => (accepting ? { accept: true } : { accept: false, code: 421 }) });
    stack = await startStack({ gateway: true, smtp: { url: smtp.url, from: "Vaultgate <no-reply@vaultgate.test>" }, mailPollMs: 0 });
  });
  afterEach(() => {
    accepting = true;
  });
  after(async () => {
    await stack?.close();
    await smtp?.close();
  });

  /** Asks for a sign-in code on the page; resolves the code form's fields. */
  async function askForCode(email: string) {
    const jar = createJar(stack.url);
    const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
    const sent = await jar.post("/signin", { ...fields, email });
    expect(sent.status).to.equal(303);
    return { jar, codeFields: formFields(await (await jar.get(sent.headers.get("location")!)).text(), "/signin/code") };
  }

  /** The kill switch pulled by one of the user's agents: a notice to the account holder. */
  async function killSwitchNotice(user: { userId: string; vaultId: string }) {
    const { token } = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] });
    await stack.clients.grants.revokeAllGrants({ accessToken: token!.accessToken, reason: "suspicious" });
  }

  it("an outage longer than the code's 10 minutes: the code mail is dropped, the notice queued with it arrives", async () => {
    const user = await createUser(stack);
    accepting = false;
    await askForCode(user.email);
    await killSwitchNotice(user);
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email)).to.have.length(0);
    stack.clock.advance(11 * 60_000);
    accepting = true;
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email).map((m) => m.subject)).to.deep.equal(["Vaultgate: the kill switch was used"]);
    // Dropped, not queued for later: the next passes send nothing more.
    stack.clock.advance(60 * 60_000);
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email)).to.have.length(1);
    const logs = stack.logs.text();
    expect(logs).to.include("mail dropped unsent: the one-time code in it has expired");
    expect(logs).not.to.include(user.email);
  });

  it("an outage shorter than the code's life: the code arrives when the server returns and signs the person in", async () => {
    const user = await createUser(stack);
    accepting = false;
    const { jar, codeFields } = await askForCode(user.email);
    await stack.core.mail!.runOnce();
    expect(smtp.to(user.email)).to.have.length(0);
    stack.clock.advance(9 * 60_000);
    accepting = true;
    await stack.core.mail!.runOnce();
    const [mail] = smtp.to(user.email);
    expect(mail?.subject).to.match(/^Your Vaultgate code: \d{6}$/);
    const done = await jar.post("/signin/code", { ...codeFields, code: codeIn(mail!) });
    expect(done.status).to.equal(303);
  });
});
