import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { afterSendGap, createUser } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";

/**
 * A browser a person signed in with gets a code sign-in budget of its own: outsiders who spend
 * the account's cannot lock them out, and the mark buys nothing anywhere else.
 */
describe("Known browsers and code sign-in budgets (GrantsService)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const codeOf = async (email: string) => {
    const { messages } = await stack.admin.grants.listOutbox({ email });
    return /code: (\d{6})/.exec(messages.find((m) => /code: \d{6}/.test(m.subject))!.subject)![1]!;
  };
  const start = (email: string, browserToken = "") => afterSendGap(stack, () => stack.clients.grants.startSignIn({ email, browserToken }));
  async function signIn(email: string, browserToken = "") {
    const { challengeId } = await start(email, browserToken);
    return stack.clients.grants.completeSignIn({ challengeId, code: await codeOf(email), browserToken });
  }
  /** Ten wrong codes and every send the hour allows, with no mark. */
  async function lockOut(email: string) {
    for (let c = 0; c < 2; c++) {
      const { challengeId } = await start(email);
      for (let i = 0; i < 5; i++) await expectRefused(stack.clients.grants.completeSignIn({ challengeId, code: "0000000" }), Reason.INVALID_GRANT);
    }
    for (;;) {
      const sent = await start(email).catch((err: unknown) => err);
      if (!(sent instanceof Error)) continue;
      expect(reasonOf(sent)).to.equal(Reason.RATE_LIMITED);
      return;
    }
  }

  it("a sign-in answers a mark that lets that browser in while the account is locked", async () => {
    const user = await createUser(stack);
    const first = await signIn(user.email);
    expect(first.browserToken).to.match(/^vgb_/);
    stack.clock.advance(31_000);
    await lockOut(user.email);
    await expectRefused(stack.clients.grants.startSignIn({ email: user.email }), Reason.RATE_LIMITED);
    const again = await signIn(user.email, first.browserToken);
    expect((await stack.clients.grants.getSession({ sessionToken: again.sessionToken })).session!.userId).to.equal(user.userId);
  });

  it("a forged, foreign or expired mark spends the account's budget like none", async () => {
    const [user, other] = [await createUser(stack), await createUser(stack)];
    const mine = (await signIn(user.email)).browserToken;
    const foreign = (await signIn(other.email)).browserToken;
    stack.clock.advance(31_000);
    await lockOut(user.email);
    const forged = `${mine.slice(0, -2)}${mine.endsWith("AA") ? "BB" : "AA"}`;
    for (const browserToken of [foreign, forged, `vgb_${"x".repeat(600)}`, "garbage", mine.replace("vgb_", "vgs_")]) {
      await expectRefused(stack.clients.grants.startSignIn({ email: user.email, browserToken }), Reason.RATE_LIMITED);
    }
    // Past its 180 days the mark is forgotten: the account's budget applies again.
    stack.clock.advance(181 * 86_400_000);
    await lockOut(user.email);
    await expectRefused(stack.clients.grants.startSignIn({ email: user.email, browserToken: mine }), Reason.RATE_LIMITED);
  });

  it("a stolen mark is still limited: many concurrent wrong codes check at most 10 (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent guesses need several connections");
    const user = await createUser(stack);
    const mark = (await signIn(user.email)).browserToken;
    const challenges: string[] = [];
    for (let c = 0; c < 4; c++) challenges.push((await start(user.email, mark)).challengeId);
    const answers = await Promise.allSettled(
      challenges.flatMap((challengeId) => [0, 1, 2, 3, 4].map(() => stack.clients.grants.completeSignIn({ challengeId, code: "0000000", browserToken: mark }))),
    );
    const reasons = answers.map((a) => (a.status === "rejected" ? reasonOf(a.reason) : "signed in"));
    expect(reasons.filter((r) => r !== Reason.INVALID_GRANT && r !== Reason.RATE_LIMITED)).to.deep.equal([]);
    const { rows } = await stack.core.db.raw(`SELECT coalesce(sum(attempts), 0)::int AS n FROM signin_challenges WHERE id = ANY(?::uuid[])`, [challenges]);
    expect(rows[0].n).to.equal(10);
    // The mark's budget is spent; the account's is not, so a browser without the mark still gets in.
    const { challengeId } = await start(user.email, mark);
    await expectRefused(stack.clients.grants.completeSignIn({ challengeId, code: await codeOf(user.email), browserToken: mark }), Reason.RATE_LIMITED);
    expect((await signIn(user.email)).sessionToken).to.match(/^vgs_/);
  });
});
