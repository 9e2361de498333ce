import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { afterSendGap, createUser } from "../../support/agent-oauth.js";
import { ownerSession } from "../../support/budgets.js";
import { requirePostgres } from "../../support/db.js";
import { expectRefused } from "../../support/refusals.js";

/** A sign-in ends the session the browser held before, in its own transaction, or not at all. */
describe("Session replacement at sign-in (GrantsService)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const live = async (token: string) => (await stack.clients.grants.getSession({ sessionToken: token })).session!.userId;
  const ended = (token: string) => expectRefused(stack.clients.grants.getSession({ sessionToken: token }), Reason.INVALID_TOKEN);

  it("ends the replaced session, whoever it belonged to, and keeps the new one", async () => {
    const [first, second] = [await createUser(stack), await createUser(stack)];
    const old = await ownerSession(stack, first.userId);
    const next = await ownerSession(stack, second.userId, { replaces: old });
    await ended(old);
    expect(await live(next)).to.equal(second.userId);
  });

  it("a sign-in that fails leaves the old session live; a step-up ignores the field", async () => {
    const user = await createUser(stack);
    const old = await ownerSession(stack, user.userId);
    const started = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: user.email }));
    await expectRefused(
      stack.clients.grants.completeSignIn({ challengeId: started.challengeId, code: "000000", replacesSessionToken: old }),
      Reason.INVALID_GRANT,
    );
    expect(await live(old)).to.equal(user.userId);
    const stepUp = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ sessionToken: old }));
    const { messages } = await stack.admin.grants.listOutbox({ email: user.email });
    const code = /(\d{6})/.exec(messages[0]!.subject)![1]!;
    await stack.clients.grants.completeSignIn({ challengeId: stepUp.challengeId, code, sessionToken: old, replacesSessionToken: old });
    expect((await stack.clients.grants.getSession({ sessionToken: old })).session!.stepUpFresh).to.equal(true);
  });

  it("an unknown, ended or oversized replaced token changes nothing and refuses nothing", async () => {
    const user = await createUser(stack);
    const old = await ownerSession(stack, user.userId);
    await stack.clients.grants.endSession({ sessionToken: old });
    for (const replaces of ["vgs_unknown", old, "x".repeat(5000)]) {
      expect(await live(await ownerSession(stack, user.userId, { replaces }))).to.equal(user.userId);
    }
  });

  it("many sign-ins racing to replace one session all succeed and leave it ended (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need a pool of real connections");
    const holder = await createUser(stack);
    const old = await ownerSession(stack, holder.userId);
    const users = await Promise.all(Array.from({ length: 8 }, () => createUser(stack)));
    const outcomes = await Promise.allSettled(users.map((u) => ownerSession(stack, u.userId, { replaces: old })));
    expect(outcomes.flatMap((o) => (o.status === "rejected" ? [String(o.reason)] : []))).to.deep.equal([]);
    await ended(old);
    for (const [i, o] of outcomes.entries()) expect(await live((o as PromiseFulfilledResult<string>).value)).to.equal(users[i]!.userId);
  });
});
