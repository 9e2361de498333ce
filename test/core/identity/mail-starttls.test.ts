import { expect } from "chai";
import { makeTestCerts, type TestCerts } from "../../support/certs.js";
import { startSmtpServer, type TestSmtpServer } from "../../support/smtp.js";
import { createSmtpTransport, MailSendError } from "../../../core/identity/mail/transport.js";

const FROM = "Vaultgate <no-reply@vaultgate.test>";
const AUTH = { user: "vaultgate", pass: "s3cret-app-password" };
const mail = (to: string) => ({ id: "00000000-0000-4000-8000-000000000001", to, subject: "Your Vaultgate code: 271828", body: "Use 271828 to sign in." });
const credentials = `${AUTH.user}:${AUTH.pass}@127.0.0.1`;

describe("SMTP over smtp:// requires STARTTLS unless the URL allows plaintext", () => {
  let certs: TestCerts;
  let smtp: TestSmtpServer | undefined;
  before(async () => {
    certs = await makeTestCerts();
  });
  after(() => certs.remove());
  afterEach(async () => {
    await smtp?.close();
    smtp = undefined;
  });

  it("sends nothing, not even the password, to a server that offers no STARTTLS, and says why", async () => {
    smtp = await startSmtpServer({ auth: AUTH });
    const transport = createSmtpTransport({ url: `smtp://${credentials}:${smtp.port}`, from: FROM, timeoutMs: 5_000 });
    const err = await transport.send(mail("ann@example.test")).then(
      () => undefined,
      (e: unknown) => e,
    );
    transport.close();
    expect(err).to.be.instanceOf(MailSendError);
    expect((err as MailSendError).message).to.match(/offers no STARTTLS/);
    // A setting to fix, like a wrong password: retried, not a refusal of this message.
    expect((err as MailSendError).permanent).to.equal(false);
    expect((err as MailSendError).message).not.to.include(AUTH.pass);
    expect(smtp.received).to.have.length(0);
    expect(smtp.auths).to.have.length(0);
  });

  it("upgrades with STARTTLS before AUTH and the message when the server offers it", async () => {
    smtp = await startSmtpServer({ auth: AUTH, starttls: certs.server });
    const transport = createSmtpTransport({ url: smtp.url, from: FROM, timeoutMs: 5_000, tls: { ca: certs.ca } });
    expect(smtp.url).not.to.include("starttls");
    await transport.send(mail("bo@example.test"));
    transport.close();
    expect(smtp.auths).to.deep.equal([{ secure: true }]);
    expect(smtp.to("bo@example.test").map((m) => m.secure)).to.deep.equal([true]);
  });

  it("sends in plaintext to a server without STARTTLS only when the URL says ?starttls=optional", async () => {
    smtp = await startSmtpServer({ auth: AUTH });
    const transport = createSmtpTransport({ url: `smtp://${credentials}:${smtp.port}?starttls=optional`, from: FROM, timeoutMs: 5_000 });
    await transport.send(mail("cy@example.test"));
    transport.close();
    expect(smtp.to("cy@example.test").map((m) => m.secure)).to.deep.equal([false]);
  });

  it("refuses every other query parameter, so nothing in the URL can turn on logging or plaintext", () => {
    for (const [query, problem] of [
      ["?logger=true", /no query parameter but starttls/],
      ["?requireTLS=false", /no query parameter but starttls/],
      ["?starttls=optional&debug=true", /no query parameter but starttls/],
      ["?starttls=optional&starttls=required", /no query parameter but starttls/],
      ["?starttls=maybe", /required or optional/],
      ["#starttls=optional", /fragment/],
    ] as const) {
      const url = `smtp://${credentials}:2525${query}`;
      expect(() => createSmtpTransport({ url, from: FROM }), query).to.throw(problem);
      expect(() => createSmtpTransport({ url, from: FROM }), query).not.to.throw(AUTH.pass);
    }
    expect(() => createSmtpTransport({ url: `smtps://${credentials}:465?starttls=optional`, from: FROM })).to.throw(/smtp:\/\/ only/);
  });
});
