import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { testDatabase, requirePostgres } from "../../support/db.js";
import { startSmtpServer, codeIn, mailHarness, type TestSmtpServer } from "../../support/smtp.js";
import { createTestClock, type TestClock } from "../../support/clock.js";
import { MAIL_GIVE_UP_AFTER_MS, type MailWorker } from "../../../core/identity/mail/worker.js";
import type { Db } from "../../../core/db/knex.js";
import { coreMetricsListener } from "../../support/metrics.js";

const FROM = "Vaultgate <no-reply@vaultgate.test>";
const address = (tag: string) => `${tag}-${randomBytes(5).toString("hex")}@example.test`;

describe("mail outbox: permanent and lasting refusals", () => {
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
    await db("mail_outbox").where({ state: "pending" }).update({ state: "sent", sent_at: new Date() });
  });

  function setUp(clock: TestClock) {
    const { mailer, worker, log } = mailHarness({ db, signinCodeKey: key, url: smtp.url, from: FROM, clock });
    workers.push(worker);
    const queue = (to: string, subject: string, body: string) => db.transaction((trx) => mailer.queue(trx, { to, subject, body, at: clock() }));
    return { worker, log, queue };
  }

  const row = async (id: string) => db("mail_outbox").where({ id }).first();

  it("a 550 to the recipient ends that message after one attempt; a 451 keeps its message queued until it is accepted", async () => {
    smtp = await startSmtpServer();
    const clock = createTestClock();
    const { worker, log, queue } = setUp(clock);
    const gone = address("gone");
    const busy = address("busy");
    const fine = address("fine");
    smtp.refuseRecipient(gone, 550);
    smtp.refuseRecipient(busy, 451);
    const metrics = await coreMetricsListener();
    const attempts = async () => {
      const scrape = await metrics.scrape();
      const n = (outcome: string) => scrape.value("vaultgate_mail_attempts_total", { outcome }) ?? 0;
      return { sent: n("sent"), retry: n("retry"), failed: n("failed") };
    };
    const before = await attempts();
    const refusedId = await queue(gone, "Your Vaultgate code: 662607", "Use 662607 to sign in.");
    const laterId = await queue(busy, "Vaultgate: a new passkey", "A passkey was added to your account.");
    await queue(fine, "Vaultgate: kill switch used", "Every agent's access was revoked.");
    for (let pass = 0; pass < 20; pass++) {
      await worker.runOnce();
      clock.advance(20_000);
    }
    const refusedCodes = smtp.refused.map((r) => r.code);
    expect(
      refusedCodes.filter((c) => c === 550),
      "the refused address is tried once",
    ).to.have.length(1);
    expect(refusedCodes.filter((c) => c === 451).length, "the busy one again and again").to.be.greaterThan(3);
    const failed = await row(refusedId);
    expect(failed.state).to.equal("failed");
    expect(failed.attempts).to.equal(1);
    expect(failed.last_error).to.equal("SMTP 550");
    expect(failed.failed_at).to.not.equal(null);
    const waiting = await row(laterId);
    expect(waiting.state).to.equal("pending");
    expect(waiting.last_error).to.equal("SMTP 451");
    expect(smtp.to(fine)).to.have.length(1);
    // The busy mailbox recovers: its message goes out once; the refused one never does.
    smtp.refuseRecipient(busy, undefined);
    clock.advance(60_000);
    while ((await worker.runOnce()) > 0) clock.advance(60_000);
    expect(smtp.to(busy)).to.have.length(1);
    expect((await row(laterId)).state).to.equal("sent");
    expect(smtp.received.filter((m) => m.to.includes(gone))).to.have.length(0);
    expect((await row(refusedId)).attempts).to.equal(1);
    expect(log.text()).to.include("mail given up unsent: the server refused it permanently");
    expect(log.text()).to.include(refusedId);
    for (const secret of [gone, busy, "662607", "passkey was added"]) expect(log.text()).not.to.include(secret);
    const after = await attempts();
    await metrics.close();
    expect(after.sent - before.sent, "sent: the fine one and the recovered one").to.equal(2);
    expect(after.failed - before.failed, "failed: the refused one").to.equal(1);
    expect(after.retry - before.retry, "each 451 is a retry").to.equal(refusedCodes.filter((c) => c === 451).length);
  });

  it("a 554 to the message's data ends it too; the next message to another address is still sent", async () => {
    let first = true;
    smtp = await startSmtpServer({
      answer: () => {
        if (!first) return { accept: true };
        first = false;
        return { accept: false, code: 554 };
      },
    });
    const clock = createTestClock();
    const { worker, queue } = setUp(clock);
    const refusedId = await queue(address("data"), "Vaultgate: code sign-in paused", "Someone tried codes for your account.");
    const to = address("next");
    await queue(to, "Your Vaultgate code: 299792", "Use 299792 to sign in.");
    expect(await worker.runOnce()).to.equal(2);
    clock.advance(60 * 60_000);
    expect(await worker.runOnce()).to.equal(0);
    expect((await row(refusedId)).state).to.equal("failed");
    expect(smtp.to(to).map(codeIn)).to.deep.equal(["299792"]);
  });

  it("a notice refused with 4xx for longer than the give-up time ends failed instead of being retried forever", async () => {
    smtp = await startSmtpServer();
    const clock = createTestClock();
    const { worker, log, queue } = setUp(clock);
    const to = address("full");
    smtp.refuseRecipient(to, 452);
    const id = await queue(to, "Vaultgate: kill switch used", "Every agent's access was revoked.");
    expect(await worker.runOnce()).to.equal(1);
    expect((await row(id)).state).to.equal("pending");
    clock.advance(MAIL_GIVE_UP_AFTER_MS);
    expect(await worker.runOnce()).to.equal(1);
    const r = await row(id);
    expect(r.state).to.equal("failed");
    expect(r.last_error).to.equal("SMTP 452");
    clock.advance(3_600_000);
    expect(await worker.runOnce()).to.equal(0);
    expect(smtp.refused).to.have.length(2);
    expect(log.text()).to.include("mail given up unsent: it kept failing for too long");
    expect(log.text()).not.to.include(to);
  });

  describe("on PostgreSQL", () => {
    before(function () {
      requirePostgres(this, "concurrent senders need several connections");
    });

    it("many senders at once try each permanently refused message once and deliver the rest once", async () => {
      smtp = await startSmtpServer();
      const clock = createTestClock();
      const senders = Array.from({ length: 5 }, () => setUp(clock));
      const gone = address("gone");
      const ok = address("ok");
      smtp.refuseRecipient(gone, 550);
      const ids = await Promise.all(
        Array.from({ length: 60 }, (_, i) => senders[0]!.queue(i % 2 ? gone : ok, `Your Vaultgate code: ${String(400000 + i)}`, "Use it.")),
      );
      for (let round = 0; round < 5; round++) {
        await Promise.all(senders.map((s) => s.worker.runOnce()));
        clock.advance(60_000);
      }
      expect(smtp.refused.filter((r) => r.code === 550)).to.have.length(30);
      expect(smtp.to(ok)).to.have.length(30);
      const states = await db("mail_outbox").whereIn("id", ids).select("state", "attempts");
      expect(states.filter((s) => s.state === "failed" && s.attempts === 1)).to.have.length(30);
      expect(states.filter((s) => s.state === "sent")).to.have.length(30);
    });
  });
});
