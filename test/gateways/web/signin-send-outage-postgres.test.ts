import { setTimeout as sleep } from "node:timers/promises";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, latestCode } from "../../support/agent-oauth.js";
import { requirePostgres, testDatabase } from "../../support/db.js";
import type { Db } from "../../../core/db/knex.js";

/**
 * A code send cut off by the database (its session terminated, as a restarting server does):
 * the page says to try again, and trying again sends the code, never "a code was sent moments
 * ago" for a code that was never sent.
 */
describe("web pages: a sign-in code send that met a database outage (PostgreSQL)", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let db: Db;

  before(async function () {
    requirePostgres(this, "the embedded database has no session to terminate");
    this.timeout(180_000);
    stack = await startStack({ gateway: true });
    db = (await testDatabase()).db;
  });
  after(async () => {
    await stack?.close();
  });

  /** The backend whose insert of a one-time code waits for the lock this test holds. */
  async function waitingInsert(): Promise<number> {
    for (;;) {
      const { rows } = await db.raw(`SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE 'insert into "signin_challenges"%'`);
      if ((rows as unknown[]).length > 0) return Number((rows as { pid: number }[])[0]!.pid);
      await sleep(20);
    }
  }

  it("the cut-off send is answered 503, and asking again at once sends the code; it signs the person in", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
    const hold = await db.transaction();
    try {
      await hold.raw("LOCK TABLE signin_challenges IN ACCESS EXCLUSIVE MODE");
      const pending = jar.post("/signin", { ...fields, email: user.email });
      await db.raw("SELECT pg_terminate_backend(?)", [await waitingInsert()]);
      const cut = await pending;
      expect(cut.status).to.equal(503);
      expect(await cut.text()).to.include("Temporarily unavailable");
    } finally {
      await hold.rollback();
    }
    expect((await stack.admin.grants.listOutbox({ email: user.email })).messages).to.have.length(0);

    const again = await jar.post("/signin", { ...fields, email: user.email });
    expect(again.status, "nothing was sent, so nothing was sent moments ago").to.equal(303);
    const codeFields = formFields(await (await jar.get(again.headers.get("location")!)).text(), "/signin/code");
    const done = await jar.post("/signin/code", { ...codeFields, code: await latestCode(stack, user.email) });
    expect(done.status).to.equal(303);
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);
  });
});
