import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { startStack, type TestStack } from "../../support/stack.js";
import { afterSendGap, createUser } from "../../support/agent-oauth.js";
import { refusalOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import { startSmtpServer, type TestSmtpServer } from "../../support/smtp.js";

/**
 * StartSignIn and CompleteSignIn answer the same for every address, so they must also do the
 * same database work: more statements for an account than for no account would tell an outsider
 * by their timing which addresses have one. Compared by statement shape, never by the clock.
 */

/** "insert signin_challenges", "select users", ...: what a statement does to which table. */
function shape(sql: string): string {
  const s = sql.replace(/"/g, "").replace(/\s+/g, " ").trim().toLowerCase();
  const kind = /^(select|insert|update|delete|with)\b/.exec(s)?.[1] ?? s.split(" ")[0]!;
  const table = /^insert into (\w+)/.exec(s)?.[1] ?? /^update (\w+)/.exec(s)?.[1] ?? /\bfrom (\w+)/.exec(s)?.[1] ?? "";
  return `${kind} ${table}${/\bfor (update|share|no key update|key share)\b/.test(s) ? " locked" : ""}`;
}

/** The shapes of the statements core sends while `work` runs. */
async function statements(stack: TestStack, work: () => Promise<unknown>): Promise<string[]> {
  const seen: string[] = [];
  const listener = (q: { sql: string }) => void seen.push(shape(q.sql));
  stack.core.db.on("query", listener);
  try {
    await work();
  } finally {
    stack.core.db.off("query", listener);
  }
  return seen;
}

/** All starts here come from one caller: the per-caller flow-start limit is another file's concern. */
const FLOW_STARTS = 1000;

const unknownAddress = () => `nobody-${randomBytes(5).toString("hex")}@example.com`;

function sameWorkCases(mode: "dev outbox" | "SMTP outbox", open: () => Promise<{ stack: TestStack; mailed: (email: string) => Promise<number> }>) {
  describe(`Code sign-in does the same database work for any address (${mode})`, () => {
    let stack: TestStack;
    let mailed: (email: string) => Promise<number>;
    before(async () => {
      ({ stack, mailed } = await open());
    });
    after(() => stack?.close());

    const start = (email: string) => statements(stack, () => stack.clients.grants.startSignIn({ email }));

    it("an active account's start sends the statements an unknown address's does, and only the account is mailed, once", async () => {
      const user = await createUser(stack);
      const nobody = unknownAddress();
      const known = await start(user.email);
      const unknown = await start(nobody);
      expect(known).to.include("insert signin_challenges");
      expect(known).to.deep.equal(unknown);
      expect(await mailed(user.email)).to.equal(1);
      expect(await mailed(nobody)).to.equal(0);
    });

    it("a deactivated account's start sends those same statements and mails nothing", async () => {
      const user = await createUser(stack);
      await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
      const inactive = await start(user.email);
      const unknown = await start(unknownAddress());
      expect(inactive).to.deep.equal(unknown);
      expect(await mailed(user.email)).to.equal(0);
    });

    it("many concurrent starts for accounts and unknown addresses: each account is mailed its code once, no one else anything (PostgreSQL only)", async function () {
      requirePostgres(this, "PGlite runs one statement at a time, so nothing is concurrent");
      const users = await Promise.all(Array.from({ length: 8 }, () => createUser(stack)));
      const nobodies = Array.from({ length: 8 }, unknownAddress);
      const emails = [...users.map((u) => u.email), ...nobodies];
      // Three starts per address at once: the 30 s gap lets exactly one through per address.
      const answers = await Promise.allSettled(emails.flatMap((email) => [0, 1, 2].map(() => stack.clients.grants.startSignIn({ email }))));
      const started = answers.filter((a) => a.status === "fulfilled").length;
      expect(started).to.equal(emails.length);
      for (const u of users) expect(await mailed(u.email), u.email).to.equal(1);
      for (const n of nobodies) expect(await mailed(n), n).to.equal(0);
    });

    /**
     * Wrong codes for `email` until its budget is spent and one more: per code, the statements
     * core sent and the answer (its reason and words).
     */
    async function guesses(email: string) {
      const seen: { statements: string[]; answer: string }[] = [];
      for (let c = 0; c < 3; c++) {
        const { challengeId } = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email }));
        for (let i = 0; i < (c < 2 ? 5 : 1); i++) {
          let answer = "";
          const sent = await statements(stack, async () => {
            const r = await refusalOf(stack.clients.grants.completeSignIn({ challengeId, code: "0000000" }));
            answer = `${r.reason} ${r.message}`;
          });
          seen.push({ statements: sent, answer });
        }
        stack.clock.advance(31_000);
      }
      return seen;
    }

    it("wrong codes for an account's challenges, up to the pause and past it, do the work and get the answers an unknown address's do", async () => {
      const user = await createUser(stack);
      const known = await guesses(user.email);
      const unknown = await guesses(unknownAddress());
      expect(known.map((g) => g.answer)).to.deep.equal(unknown.map((g) => g.answer));
      expect(known.map((g) => g.statements)).to.deep.equal(unknown.map((g) => g.statements));
      // The pause is still told to the account holder, and to nobody else.
      expect(await mailed(user.email)).to.equal(4);
    });
  });
}

sameWorkCases("dev outbox", async () => {
  const stack = await startStack({ signinFlowStartsPerMinute: FLOW_STARTS });
  return { stack, mailed: async (email) => (await stack.admin.grants.listOutbox({ email })).messages.length };
});

sameWorkCases("SMTP outbox", async () => {
  const server: TestSmtpServer = await startSmtpServer();
  const stack = await startStack({
    smtp: { url: server.url, from: "Vaultgate <no-reply@vaultgate.test>" },
    mailPollMs: 0,
    signinFlowStartsPerMinute: FLOW_STARTS,
  });
  const close = stack.close.bind(stack);
  stack.close = async () => {
    await close();
    await server.close();
  };
  return {
    stack,
    mailed: async (email) => {
      // Other suites' undelivered mail may share the outbox: count this address's only.
      while ((await stack.core.mail!.runOnce()) > 0);
      return server.to(email).length;
    },
  };
});
