import { expect } from "chai";
import { randomUUID } from "node:crypto";
import knexFactory, { type Knex } from "knex";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import type { StepName } from "../../../core/budgets/records.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { requirePostgres, testDatabase } from "../../support/db.js";
import { budgetParams, grantFor } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../../support/budget-life.js";

/** Calls with one budget key racing: retries of a failed key, and first calls with other parameters. */
describe("BudgetsService.CreateBudget: calls with one key racing (Postgres)", () => {
  let stack: TestStack;
  let failing: StepName | undefined;
  let outside: Knex;
  before(async function () {
    requirePostgres(this, "the race needs row locks held from another connection");
    stack = await startStack({
      provisioningLimitPerMinute: 1000,
      budgetFaults: { step: (name, phase) => (phase === "run" && name === failing ? new Error(`injected fault in ${name}`) : undefined) },
    });
    outside = knexFactory({ client: "pg", connection: (await testDatabase()).url!, pool: { min: 3, max: 3 } });
  });
  after(async () => {
    await outside?.destroy();
    await stack?.close();
  });

  /** Resolves once `n` statements of this database wait for a lock. */
  async function lockWaiters(n: number) {
    for (;;) {
      const { rows } = await outside.raw(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`);
      if ((rows as { n: number }[])[0]!.n >= n) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  it("two first calls with one key and other parameters: one provisions it, the other is idempotency_conflict (not contention)", async () => {
    const { child: a } = await budgetUnderRoot(stack, { parentCents: 0n });
    const aToken = await grantFor(stack, a, { stepUp: true });
    const key = `key-${randomUUID()}`;
    await stack.clients.budgets.createBudget({ accessToken: aToken, ...budgetParams() }); // the vault's rate-limit row exists
    // Both read the key as unused, then wait on the rate limit; released, one inserts the key first.
    const rateRow = await outside.transaction();
    try {
      await rateRow.raw(`SELECT 1 FROM rate_limit_logs WHERE key = ? FOR UPDATE`, [`budget-provisioning:${a.vaultId}`]);
      const calls = ["Lisbon", "Porto"].map((city) =>
        stack.clients.budgets.createBudget({ accessToken: aToken, ...budgetParams({ displayName: city, idempotencyKey: key }) }).then(
          (r) => ({ ok: r.budget! }),
          (err: unknown) => ({ err }),
        ),
      );
      await lockWaiters(2);
      await rateRow.commit();
      const outcomes = await Promise.all(calls);
      expect(outcomes.filter((o) => "ok" in o)).to.have.length(1);
      const refused = outcomes.find((o) => "err" in o) as { err: unknown };
      await expectRefused(Promise.reject(refused.err), Reason.IDEMPOTENCY_CONFLICT);
    } finally {
      if (!rateRow.isCompleted()) await rateRow.rollback();
    }
  });

  it("a retry that read the key before the other retry finished it never provisions the finished, funded budget again", async () => {
    const { child: a, parentToken } = await budgetUnderRoot(stack, { parentCents: 10_000n });
    await stack.clients.budgets.fundBudget({ accessToken: parentToken, vaultId: a.vaultId, amountCents: 5_000n, idempotencyKey: `f-${randomUUID()}` });
    const aToken = await grantFor(stack, a, { stepUp: true });
    const params = budgetParams({ stepUpAmountCents: undefined });
    failing = "policy";
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: aToken, ...params }), Reason.PROVISIONING_FAILED);
    failing = undefined;

    // Retry 1 waits on the parent budget's row; retry 2, which has read the failed key, waits on the rate limit.
    const parentRow = await outside.transaction();
    const rateRow = await outside.transaction();
    try {
      await parentRow.raw(`SELECT 1 FROM budgets WHERE vault_id = ? FOR UPDATE`, [a.vaultId]);
      const first = stack.clients.budgets.createBudget({ accessToken: aToken, ...params });
      await lockWaiters(1);
      await rateRow.raw(`SELECT 1 FROM rate_limit_logs WHERE key = ? FOR UPDATE`, [`budget-provisioning:${a.vaultId}`]);
      const second = stack.clients.budgets.createBudget({ accessToken: aToken, ...params }).then(
        (r) => ({ ok: r.budget! }),
        (err: unknown) => ({ err }),
      );
      await lockWaiters(2);
      await parentRow.commit();
      const { budget } = await first;
      expect(budget!.status).to.equal(BudgetStatus.ACTIVE);
      await stack.clients.budgets.fundBudget({ accessToken: aToken, vaultId: budget!.vaultId, amountCents: 2_000n, idempotencyKey: `f-${randomUUID()}` });
      // Should retry 2 provision the key again, a failing step would unwind the funded budget.
      failing = "policy";
      await rateRow.commit();
      const late = await second;
      failing = undefined;
      expect(late, "the late retry answers the finished budget").to.have.property("ok");
      const replayed = (late as { ok: typeof budget }).ok!;
      expect([replayed.vaultId, replayed.status]).to.deep.equal([budget!.vaultId, BudgetStatus.ACTIVE]);
      const row = await stack.core.db("budgets").where({ vault_id: budget!.vaultId }).first("status");
      expect(row.status).to.equal("active");
      expect(await balanceOf(stack, budget!.vaultId)).to.equal(2_000);
      await expectLedgerBalanced(stack);
    } finally {
      failing = undefined;
      if (!parentRow.isCompleted()) await parentRow.rollback();
      if (!rateRow.isCompleted()) await rateRow.rollback();
    }
  });
});
