import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { testDatabase } from "../../support/db.js";
import { createCapturedLogger } from "../../support/logs.js";
import { createPruner } from "../../../core/maintenance/pruner.js";
import type { Db } from "../../../core/db/knex.js";

describe("pruner: sign-in flows and sent mail", () => {
  let db: Db;
  before(async function () {
    this.timeout(180_000);
    db = (await testDatabase()).db;
  });

  it("drops expired flows (with the sessions that named them) and mail sent over a day ago; keeps waiting mail and live flows", async () => {
    const now = new Date();
    const hourAgo = new Date(now.getTime() - 3600_000);
    const userId = randomUUID();
    await db("users").insert({ id: userId, email: `prune-${userId}@example.test`, created_at: now });
    const endedSession = randomUUID();
    await db("web_sessions").insert({ id: endedSession, token_hash: randomUUID(), user_id: userId, created_at: hourAgo, expires_at: hourAgo });
    const flow = (id: string, expires: Date, sessionId: string | null) => ({
      id,
      binding_hash: randomUUID(),
      method: "passkey",
      purpose: sessionId ? "step_up" : "sign_in",
      session_id: sessionId,
      user_id: sessionId ? userId : null,
      challenge: "c",
      created_at: hourAgo,
      expires_at: expires,
    });
    const [expired, live, ofEndedSession] = [randomUUID(), randomUUID(), randomUUID()];
    await db("signin_flows").insert([
      flow(expired, hourAgo, null),
      flow(live, new Date(now.getTime() + 600_000), null),
      flow(ofEndedSession, new Date(now.getTime() + 600_000), endedSession),
    ]);
    const mail = (id: string, state: string, sentAt: Date | null, failedAt: Date | null = null) => ({
      id,
      recipient: "a@example.test",
      subject: "s",
      body: "b",
      created_at: new Date(now.getTime() - 3 * 86_400_000),
      state,
      next_attempt_at: now,
      sent_at: sentAt,
      failed_at: failedAt,
    });
    const [oldSent, recentSent, waiting, oldFailed, recentFailed] = [randomUUID(), randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    await db("mail_outbox").insert([
      mail(oldSent, "sent", new Date(now.getTime() - 2 * 86_400_000)),
      mail(recentSent, "sent", hourAgo),
      mail(waiting, "pending", null),
      mail(oldFailed, "failed", null, new Date(now.getTime() - 2 * 86_400_000)),
      mail(recentFailed, "failed", null, hourAgo),
    ]);

    const report = await createPruner({ db, clock: () => now, logger: createCapturedLogger().logger }).runOnce();
    expect(report.signin_flows).to.be.at.least(1);
    expect(report.mail_outbox).to.be.at.least(1);
    expect((await db("signin_flows").whereIn("id", [expired, live, ofEndedSession])).map((r) => r.id)).to.deep.equal([live]);
    expect(await db("web_sessions").where({ id: endedSession })).to.have.length(0);
    const kept = await db("mail_outbox").whereIn("id", [oldSent, recentSent, waiting, oldFailed, recentFailed]).orderBy("seq");
    expect(kept.map((r) => r.id)).to.deep.equal([recentSent, waiting, recentFailed]);
  });
});
