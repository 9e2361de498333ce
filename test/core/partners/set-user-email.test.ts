import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { afterSendGap, createUser, latestCode } from "../../support/agent-oauth.js";
import { ownerSession } from "../../support/budgets.js";
import { requirePostgres } from "../../support/db.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";

/** PartnerResourcesService.SetUserEmail and GetUserByEmail: the operator fixes an address, old or new. */
describe("PartnerResourcesService.SetUserEmail", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
  });
  after(() => stack.close());

  const fresh = (tag = "new") => `${tag}-${randomUUID().slice(0, 8)}@example.com`;
  const setEmail = (userId: string, email: string) => stack.admin.partnerResources.setUserEmail({ userId, email });
  const find = (email: string) => stack.admin.partners.getUserByEmail({ email });
  /** A user row as an earlier version stored it, before the current address rule. */
  const legacyUser = async (email: string) => {
    const id = randomUUID();
    await stack.core.db("users").insert({ id, email, status: "active", created_at: new Date() });
    return id;
  };

  it("changes the address, answers the old one, and audits the change without either address", async () => {
    const user = await createUser(stack);
    const next = fresh();
    const res = await setEmail(user.userId, `  ${next.toUpperCase()} `);
    expect(res).to.include({ userId: user.userId, email: next, previousEmail: user.email, sessionsEnded: 0 });
    expect((await find(next)).user!.userId).to.equal(user.userId);
    await expectRefused(find(user.email), Reason.NOT_FOUND);
    const rows = await stack.core.db("audit_records").where({ action: "user.set_email", subject: user.userId });
    expect(rows.map((r) => [r.actor, r.outcome])).to.deep.equal([["admin", "success"]]);
    expect(JSON.stringify(rows)).to.not.include(next).and.not.include(user.email);
  });

  it("refuses an address the current rule refuses, with the message every surface gives, and changes nothing", async () => {
    const user = await createUser(stack);
    for (const bad of ["a..b@example.com", ".ada@example.com", "ada@127.0.0.1", "ada@x_y.com", "ada\u200b@example.com", "nope", ""]) {
      await expectRefused(setEmail(user.userId, bad), Reason.INVALID_REQUEST, /^email must be an e-mail address$/);
    }
    await expectRefused(setEmail(randomUUID(), fresh()), Reason.NOT_FOUND);
    await expectRefused(setEmail("not-a-uuid", fresh()), Reason.INVALID_REQUEST, /user_id must be a UUID/);
    expect((await find(user.email)).user!.userId).to.equal(user.userId);
  });

  it("refuses another user's address in any case or spelling as a conflict; the user's own is a no-op", async () => {
    const [a, b] = [await createUser(stack), await createUser(stack)];
    await expectRefused(setEmail(b.userId, a.email.toUpperCase()), Reason.INVALID_REQUEST, /^another user already has this e-mail address$/);
    // An address stored before domains were put in one spelling is the same mailbox.
    const local = `legacy-${randomUUID().slice(0, 8)}`;
    await legacyUser(`${local}@xn--bcher-kva.de`);
    await expectRefused(setEmail(b.userId, `${local}@BÜCHER.de`), Reason.INVALID_REQUEST, /another user already has/);
    expect((await find(b.email)).user!.userId).to.equal(b.userId);
    expect(await setEmail(a.userId, a.email)).to.include({ email: a.email, previousEmail: a.email, sessionsEnded: 0 });
  });

  it("finds a user by an address stored before the current rule, in any case, and lets the operator fix it", async () => {
    const broken = `a..${randomUUID().slice(0, 8)}@Example.com`.toLowerCase();
    const id = await legacyUser(broken);
    // The person cannot ask for a code at that address any more.
    await expectRefused(stack.clients.grants.startSignIn({ email: broken }), Reason.INVALID_REQUEST);
    expect((await find(` ${broken.toUpperCase()} `)).user).to.include({ userId: id, email: broken });
    const next = fresh("fixed");
    expect(await setEmail(id, next)).to.include({ userId: id, email: next, previousEmail: broken });
    const started = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: next }));
    const signedIn = await stack.clients.grants.completeSignIn({ challengeId: started.challengeId, code: await latestCode(stack, next) });
    expect((await stack.clients.grants.getSession({ sessionToken: signedIn.sessionToken })).session).to.include({ userId: id, email: next });
    // Unbounded or address-less text is still refused, not searched.
    for (const bad of ["nope", "@example.com", "ada@", `${"a".repeat(1100)}@example.com`]) await expectRefused(find(bad), Reason.INVALID_REQUEST);
  });

  it("stops codes mailed to the old address and ends the user's sessions; codes to the new one work", async () => {
    const user = await createUser(stack);
    const session = await ownerSession(stack, user.userId);
    const stepUp = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ sessionToken: session }));
    const stepUpCode = await latestCode(stack, user.email);
    const pending = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: user.email }));
    const pendingCode = await latestCode(stack, user.email);
    const next = fresh();
    expect((await setEmail(user.userId, next)).sessionsEnded).to.equal(1);

    await expectRefused(stack.clients.grants.completeSignIn({ challengeId: pending.challengeId, code: pendingCode }), Reason.INVALID_GRANT);
    await expectRefused(stack.clients.grants.getSession({ sessionToken: session }), Reason.INVALID_TOKEN);
    await expectRefused(
      stack.clients.grants.completeSignIn({ challengeId: stepUp.challengeId, code: stepUpCode, sessionToken: session }),
      Reason.INVALID_TOKEN,
    );
    const started = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: next }));
    const res = await stack.clients.grants.completeSignIn({ challengeId: started.challengeId, code: await latestCode(stack, next) });
    expect((await stack.clients.grants.getSession({ sessionToken: res.sessionToken })).session!.userId).to.equal(user.userId);
    // The old address now names no one: asking there mails nothing.
    const before = (await stack.admin.grants.listOutbox({ email: user.email })).messages.length;
    await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: user.email }));
    expect((await stack.admin.grants.listOutbox({ email: user.email })).messages).to.have.length(before);
  });

  it("refuses a caller without the operator credential", async () => {
    const user = await createUser(stack);
    await expectRefused(stack.clients.partnerResources.setUserEmail({ userId: user.userId, email: fresh() }), Reason.ADMIN_UNAUTHENTICATED);
    expect((await find(user.email)).user!.userId).to.equal(user.userId);
  });

  it("PostgreSQL only: many users racing to one address: exactly one gets it, the others the conflict", async function () {
    requirePostgres(this, "racing transactions need a pool of real connections");
    const users = await Promise.all(Array.from({ length: 24 }, () => createUser(stack)));
    const target = fresh("race");
    const outcomes = await Promise.all(
      users.map((u, i) =>
        setEmail(u.userId, i % 2 ? target : target.toUpperCase()).then(
          () => "ok",
          (err: unknown) => reasonOf(err),
        ),
      ),
    );
    expect(outcomes.filter((o) => o === "ok")).to.have.length(1);
    expect(outcomes.filter((o) => o !== "ok")).to.deep.equal(Array(users.length - 1).fill(Reason.INVALID_REQUEST));
    const winner = users[outcomes.indexOf("ok")]!;
    expect((await find(target)).user!.userId).to.equal(winner.userId);
    for (const u of users.filter((x) => x !== winner)) expect((await find(u.email)).user!.userId).to.equal(u.userId);
    const audited = await stack.core
      .db("audit_records")
      .where({ action: "user.set_email" })
      .whereIn(
        "subject",
        users.map((u) => u.userId),
      );
    expect(audited.map((r) => r.subject)).to.deep.equal([winner.userId]);
  });
});
