import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { lockoutNotices, startChallenge, wrongFor } from "../../support/signin-codes.js";

/**
 * The "code sign-in paused" e-mail goes out once per lockout window (15 minutes) for a budget:
 * the window slides, so an outsider refilling it as old wrong codes leave must not make every
 * refill another message to the holder.
 */
describe("web pages: the lockout notice is bounded", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  /** Five wrong codes on a fresh challenge, each answered 400. */
  async function fiveWrong(email: string) {
    const jar = createJar(stack.url);
    const { fields, code } = await startChallenge(stack, jar, email);
    for (let i = 0; i < 5; i++) expect((await jar.post("/signin/code", { ...fields, code: wrongFor(code, i) })).status).to.equal(400);
  }

  it("hostile: refilling the window as old wrong codes leave tells the holder once per 15 minutes, not per refill", async () => {
    const victim = await createUser(stack);
    await fiveWrong(victim.email);
    stack.clock.advance(60_000);
    await fiveWrong(victim.email);
    expect(await lockoutNotices(stack, victim.email)).to.have.length(1);

    // The first five leave the window; five more fill it again, 14 minutes after the notice.
    stack.clock.advance(840_000);
    await fiveWrong(victim.email);
    expect(await lockoutNotices(stack, victim.email)).to.have.length(1);

    // An attack still going on 15 minutes after the notice is told again.
    stack.clock.advance(120_000);
    await fiveWrong(victim.email);
    expect(await lockoutNotices(stack, victim.email)).to.have.length(2);
  });

  it("many concurrent wrong codes refilling a full window send no second notice (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent guesses need several connections");
    const victim = await createUser(stack);
    await fiveWrong(victim.email);
    stack.clock.advance(60_000);
    await fiveWrong(victim.email);
    // The three sends below pass 93 s more: the first five have left the window, the notice's has not.
    stack.clock.advance(780_000);
    const jars = [0, 1, 2].map(() => createJar(stack.url));
    const challenges = [];
    for (const jar of jars) challenges.push({ jar, ...(await startChallenge(stack, jar, victim.email)) });
    const answers = await Promise.all(
      challenges.flatMap((c) => [0, 1, 2, 3, 4].map((i) => c.jar.post("/signin/code", { ...c.fields, code: wrongFor(c.code, i) }))),
    );
    expect(answers.filter((a) => a.status === 400)).to.have.length(5);
    expect(answers.filter((a) => a.status !== 400 && a.status !== 429)).to.deep.equal([]);
    expect(await lockoutNotices(stack, victim.email)).to.have.length(1);
  });
});
