import { expect } from "chai";
import knexFactory from "knex";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { testDatabase, requirePostgres } from "../../support/db.js";
import { grantFor, payment } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";
import { fundedChild, totalsAndSums } from "../../support/spend.js";

/**
 * The running totals under real concurrency, across a UTC midnight. PGlite runs one
 * statement at a time and would hide every race here, so this runs on PostgreSQL only.
 */
describe("Running spend totals under concurrency across midnight (Postgres)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "needs several connections: PGlite serialises everything");
    stack = await startStack();
  });
  after(() => stack?.close());

  it("payments racing over midnight: each day stays within its cap, the lifetime cap is met exactly, totals equal the sums", async () => {
    stack.clock.set(new Date("2032-02-29T23:59:59.800Z"));
    const { child } = await fundedChild(stack, { perDay: 5_000n, lifetime: 8_000n });
    const tokens = await Promise.all(Array.from({ length: 5 }, () => grantFor(stack, child)));
    const outside = knexFactory({ client: "pg", connection: (await testDatabase()).url!, pool: { min: 1, max: 1 } });
    const completedByDay = async () => {
      const { rows } = await outside.raw(
        `SELECT (completed_at AT TIME ZONE 'UTC')::date::text AS day, sum(amount_cents)::int8 AS cents, count(*)::int AS n
           FROM agent_payments WHERE vault_id = ? AND status = 'completed' GROUP BY 1 ORDER BY 1`,
        [child.vaultId],
      );
      return (rows as { day: string; cents: string; n: number }[]).map((r) => ({ day: r.day, cents: Number(r.cents), n: r.n }));
    };
    const wave = (n: number) =>
      Promise.allSettled(
        Array.from({ length: n }, (_, i) =>
          stack.clients.budgets.initiatePayment({ accessToken: tokens[i % tokens.length]!, payment: payment({ amountCents: 1_000n }) }),
        ),
      );
    try {
      // Wave 1 starts before midnight; the clock crosses it while payments still queue on the vault lock.
      const first = wave(60);
      while ((await completedByDay()).reduce((a, d) => a + d.n, 0) < 3) await new Promise((r) => setImmediate(r));
      stack.clock.set(new Date("2032-03-01T00:00:00.100Z"));
      const outcomes1 = await first;
      // Wave 2, all on 1 March: it fills whatever the caps leave.
      const outcomes2 = await wave(20);
      for (const o of [...outcomes1, ...outcomes2]) {
        if (o.status === "rejected") await expectRefused(Promise.reject(o.reason), Reason.POLICY_DENIED);
        else expect(o.value.payment!.status).to.equal(PaymentStatus.COMPLETED);
      }
      const days = await completedByDay();
      for (const d of days) expect(d.cents, `spent on ${d.day}`).to.be.at.most(5_000);
      expect(days.find((d) => d.day === "2032-02-29")!.cents).to.be.at.least(3_000);
      // At least 3,000 went before midnight, so the lifetime cap, not 1 March's, is what stops wave 2.
      expect(days.reduce((a, d) => a + d.cents, 0)).to.equal(8_000);
      expect([...outcomes1, ...outcomes2].filter((o) => o.status === "fulfilled")).to.have.length(8);
      const t = await totalsAndSums(stack, child.vaultId);
      expect(t.totals).to.deep.equal(t.sums);
      expect(t.totals.day).to.equal("2032-03-01");
      const vault = await outside("vaults").where({ id: child.vaultId }).first("balance_cents");
      expect(Number(vault.balance_cents)).to.equal(100_000_000 - 8_000);
    } finally {
      await outside.destroy();
    }
  });
});
