import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { testDatabase, requirePostgres } from "../../support/db.js";
import { startSmtpServer, codeIn, mailHarness, type SmtpAnswer, type TestSmtpServer } from "../../support/smtp.js";
import { createTestClock } from "../../support/clock.js";
import { createMailer, type Mailer } from "../../../core/identity/mail/mailer.js";
import { mailBackoffMs, type MailWorker } from "../../../core/identity/mail/worker.js";
import type { Db } from "../../../core/db/knex.js";

const FROM = "Vaultgate <no-reply@vaultgate.test>";
const address = () => `mail-${randomBytes(5).toString("hex")}@example.test`;

describe("mail outbox sent by SMTP", () => {
  let db: Db;
  let smtp: TestSmtpServer;
  const key = randomBytes(32);
  const workers: MailWorker[] = [];

  before(async function () {
    this.timeout(180_000);
    db = (await testDatabase()).db;
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await smtp?.close();
    // Each test drains what it queued; nothing is left for the next one's server.
    await db("mail_outbox").where({ state: "pending" }).update({ state: "sent", sent_at: new Date() });
  });

  function setUp(clock = createTestClock(), extra: { url?: string } = {}) {
    const { mailer, worker, log } = mailHarness({ db, signinCodeKey: key, url: extra.url ?? smtp.url, from: FROM, clock });
    workers.push(worker);
    return { mailer, worker, clock, log };
  }

  async function queue(mailer: Mailer, to: string, subject: string, body: string, at: Date) {
    return db.transaction((trx) => mailer.queue(trx, { to, subject, body, at }));
  }

  it("delivers a queued code to the address, from MAIL_FROM, and keeps only sealed text in the database", async () => {
    smtp = await startSmtpServer();
    const { mailer, worker, clock } = setUp();
    const to = address();
    const id = await queue(mailer, to, "Your Vaultgate code: 314159", "Use 314159 to sign in to Vaultgate. It expires in 10 minutes.", clock());
    const row = await db("mail_outbox").where({ id }).first();
    expect(`${row.subject} ${row.body}`).not.to.include("314159");
    expect(await worker.runOnce()).to.equal(1);
    const [m] = smtp.to(to);
    expect(m, "delivered").to.exist;
    expect(codeIn(m!)).to.equal("314159");
    expect(m!.text).to.include("It expires in 10 minutes.");
    expect(m!.from).to.equal("no-reply@vaultgate.test");
    expect(m!.messageId).to.include(id);
    expect((await db("mail_outbox").where({ id }).first()).state).to.equal("sent");
    // Sent once: the next pass finds nothing due.
    expect(await worker.runOnce()).to.equal(0);
    expect(smtp.to(to)).to.have.length(1);
  });

  it("a server refusing with 4xx for 60 seconds delays every code and notice, loses none, and sends each once", async () => {
    const clock = createTestClock();
    const recovers = clock().getTime() + 60_000;
    let n = 0;
    // Two kinds of temporary refusal in turn until the minute is over (a 5xx ends a message).
    smtp = await startSmtpServer({ answer: () => (clock().getTime() < recovers ? { accept: false, code: n++ % 2 ? 421 : 451 } : { accept: true }) });
    const { mailer, worker, log } = setUp(clock);
    const to = address();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await queue(mailer, to, `Your Vaultgate code: 10000${i}`, `Use 10000${i} to sign in.`, clock()));
    ids.push(await queue(mailer, to, "Vaultgate: code sign-in paused", "Someone tried codes for your account.", clock()));
    ids.push(await queue(mailer, to, "Vaultgate: a new passkey", "A passkey was added to your account.", clock()));
    ids.push(await queue(mailer, to, "Vaultgate: kill switch used", "Every agent's access was revoked.", clock()));
    // The test's clock moves two seconds a pass: no real waiting.
    for (let pass = 0; pass < 200 && smtp.to(to).length < ids.length; pass++) {
      await worker.runOnce();
      clock.advance(2_000);
    }
    expect(smtp.refused.length, "the server refused first").to.be.greaterThan(ids.length);
    expect(smtp.refused.map((r) => r.code)).to.include.members([451, 421]);
    const got = smtp.to(to);
    expect(got.map((m) => m.messageId).sort()).to.deep.equal(ids.map((id) => got.find((m) => m.messageId.includes(id))?.messageId).sort());
    expect(new Set(got.map((m) => m.messageId)).size, "each message once").to.equal(ids.length);
    for (const id of ids)
      expect(
        got.filter((m) => m.messageId.includes(id)),
        id,
      ).to.have.length(1);
    expect(
      await db("mail_outbox")
        .whereIn("id", ids)
        .whereNot({ state: "sent" })
        .count<{ n: number }[]>({ n: "*" })
        .first()
        .then((r) => Number(r!.n)),
    ).to.equal(0);
    // No address, code or text reached a log line.
    expect(log.text()).to.include("mail not sent; it stays queued");
    expect(log.text()).not.to.include(to);
    expect(log.text()).not.to.match(/10000\d/);
  });

  it("an outage outliving a code drops its message unsent; a code still valid and a notice (no expiry) are delivered once", async () => {
    const clock = createTestClock();
    let accepting = false;
    smtp = await startSmtpServer({ answer: () => (accepting ? { accept: true } : { accept: false, code: 421 }) });
    const { mailer, worker, log } = setUp(clock);
    const to = address();
    const at = clock();
    const code = (n: string, minutes: number) =>
      db.transaction((trx) =>
        mailer.queue(trx, { to, subject: `Your Vaultgate code: ${n}`, body: `Use ${n} to sign in.`, at, expiresAt: new Date(at.getTime() + minutes * 60_000) }),
      );
    const expired = await code("141421", 10);
    await code("173205", 30);
    await queue(mailer, to, "Vaultgate: kill switch used", "Every agent's access was revoked.", at);
    await worker.runOnce();
    expect(smtp.to(to)).to.have.length(0);
    clock.advance(11 * 60_000);
    accepting = true;
    while ((await worker.runOnce()) > 0);
    expect(smtp.to(to).map((m) => m.subject)).to.have.members(["Your Vaultgate code: 173205", "Vaultgate: kill switch used"]);
    expect(await db("mail_outbox").where({ id: expired })).to.have.length(0);
    expect(log.text()).to.include("mail dropped unsent: the one-time code in it has expired");
    expect(log.text()).to.include(expired);
    expect(log.text()).not.to.include(to);
    expect(log.text()).not.to.include("141421");
  });

  it("a mail server that is down (connection refused) delays mail until it is up", async () => {
    smtp = await startSmtpServer();
    const port = smtp.port;
    await smtp.close();
    const clock = createTestClock();
    const { mailer, worker } = setUp(clock, { url: `smtp://127.0.0.1:${port}?starttls=optional` });
    const to = address();
    const id = await queue(mailer, to, "Your Vaultgate code: 271828", "Use 271828 to sign in.", clock());
    expect(await worker.runOnce()).to.equal(1);
    const row = await db("mail_outbox").where({ id }).first();
    expect(row.state).to.equal("pending");
    expect(row.last_error).to.match(/^SMTP /);
    expect(new Date(row.next_attempt_at).getTime()).to.be.greaterThan(clock().getTime());
    // Not due yet: nothing leased.
    expect(await worker.runOnce()).to.equal(0);
    smtp = await startSmtpServer({ port });
    clock.advance(60_000);
    expect(await worker.runOnce()).to.equal(1);
    expect(smtp.to(to).map(codeIn)).to.deep.equal(["271828"]);
  });

  it("signs in with the user and password in SMTP_URL; a wrong password keeps the message queued", async () => {
    smtp = await startSmtpServer({ auth: { user: "vaultgate", pass: "p@ss word" } });
    const clock = createTestClock();
    const wrong = setUp(clock, { url: `smtp://vaultgate:nope@127.0.0.1:${smtp.port}?starttls=optional` });
    const to = address();
    await queue(wrong.mailer, to, "Your Vaultgate code: 161803", "Use 161803 to sign in.", clock());
    await wrong.worker.runOnce();
    expect(smtp.to(to)).to.have.length(0);
    const right = setUp(clock);
    clock.advance(60_000);
    expect(await right.worker.runOnce()).to.equal(1);
    expect(smtp.to(to).map(codeIn)).to.deep.equal(["161803"]);
    // The password never reaches the log of the failed attempt.
    expect(wrong.log.text()).not.to.include("nope");
  });

  it("without SMTP the mail goes to the dev outbox, sealed, and the mailer says nobody receives it", async () => {
    const mailer = createMailer({ db, signinCodeKey: key });
    expect(mailer.mode).to.equal("dev");
    expect(mailer.describe()).to.match(/dev outbox/);
    const to = address();
    await db.transaction((trx) => mailer.queue(trx, { to, subject: "Your Vaultgate code: 577215", body: "Use 577215 to sign in.", at: new Date() }));
    const rows = await db("dev_outbox").where({ email: to });
    expect(rows).to.have.length(1);
    expect(rows[0].subject).to.match(/^sealed:/);
    expect(JSON.stringify(rows)).not.to.include("577215");
    expect(await db("mail_outbox").where({ recipient: to })).to.have.length(0);
  });

  it("backs off exponentially up to the cap, with jitter between half and all of the delay", () => {
    expect(mailBackoffMs(1, 1000, 16_000, () => 1)).to.equal(1000);
    expect(mailBackoffMs(3, 1000, 16_000, () => 1)).to.equal(4000);
    expect(mailBackoffMs(3, 1000, 16_000, () => 0)).to.equal(2000);
    expect(mailBackoffMs(40, 1000, 16_000, () => 1)).to.equal(16_000);
  });

  it("a server slow past a sender's lease: what that sender had not begun goes out once, by the sender that leased it since", async () => {
    const clock = createTestClock();
    let release = () => {};
    let holding = () => {};
    const held = new Promise<void>((resolve) => (holding = resolve));
    let calls = 0;
    // The first message's reply is held until the test lets it go.
    smtp = await startSmtpServer({
      answer: () => {
        if (calls++ > 0) return { accept: true };
        holding();
        return new Promise<SmtpAnswer>((resolve) => (release = () => resolve({ accept: true })));
      },
    });
    const slow = setUp(clock);
    const other = setUp(clock);
    const to = address();
    const first = await queue(slow.mailer, to, "Vaultgate: kill switch used", "Every agent's access was revoked.", clock());
    const second = await queue(slow.mailer, to, "Vaultgate: a passkey was added", "A passkey was added to your account.", clock());
    const pass = slow.worker.runOnce();
    await held;
    // Past the slow sender's 120 s lease: the other sender takes both messages and sends them.
    clock.advance(121_000);
    expect(await other.worker.runOnce()).to.equal(2);
    release();
    expect(await pass).to.equal(2);
    const got = smtp.to(to);
    expect(got.filter((m) => m.messageId.includes(second)).length, "the message the slow sender had not begun").to.equal(1);
    // The one it was handing over when its lease ended may arrive twice, with one Message-ID.
    expect(got.filter((m) => m.messageId.includes(first)).length).to.be.within(1, 2);
    expect(await db("mail_outbox").whereIn("id", [first, second]).whereNot({ state: "sent" })).to.deep.equal([]);
  });

  describe("on PostgreSQL", () => {
    before(function () {
      requirePostgres(this, "concurrent senders need several connections");
    });

    it("many senders at once deliver every message exactly once", async () => {
      smtp = await startSmtpServer();
      const clock = createTestClock();
      const senders = Array.from({ length: 6 }, () => setUp(clock));
      const to = address();
      const ids = await Promise.all(
        Array.from({ length: 120 }, (_, i) => queue(senders[0]!.mailer, to, `Your Vaultgate code: ${String(200000 + i)}`, "Use it to sign in.", clock())),
      );
      // Every sender runs passes concurrently until the outbox is empty.
      await Promise.all(
        senders.map(async (s) => {
          while ((await s.worker.runOnce()) > 0);
        }),
      );
      const got = smtp.to(to);
      expect(got).to.have.length(ids.length);
      expect(new Set(got.map((m) => m.messageId)).size).to.equal(ids.length);
      expect(new Set(got.map(codeIn)).size).to.equal(ids.length);
    });

    it("many senders with a server that refuses every other message still deliver each once", async () => {
      let n = 0;
      smtp = await startSmtpServer({ answer: () => (n++ % 2 ? { accept: false, code: 421 } : { accept: true }) });
      const clock = createTestClock();
      const senders = Array.from({ length: 4 }, () => setUp(clock));
      const to = address();
      const ids = await Promise.all(
        Array.from({ length: 60 }, (_, i) => queue(senders[0]!.mailer, to, `Your Vaultgate code: ${String(300000 + i)}`, "Use it.", clock())),
      );
      for (let round = 0; round < 100 && smtp.to(to).length < ids.length; round++) {
        await Promise.all(senders.map((s) => s.worker.runOnce()));
        clock.advance(20_000);
      }
      const got = smtp.to(to);
      expect(got).to.have.length(ids.length);
      expect(new Set(got.map((m) => m.messageId)).size).to.equal(ids.length);
    });
  });
});
