import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, grantFor, ownerSession, type TestOwner } from "../../support/budgets.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../../support/budget-life.js";
import { requirePostgres } from "../../support/db.js";
import { strandedVaults } from "../../support/stranded.js";

/** Money a closed sub-budget kept comes back when the budget above it closes without keep_funds. */
describe("BudgetsService.CloseBudget and money kept below", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ provisioningLimitPerMinute: 1000 });
  });
  after(() => stack.close());

  const key = () => `k-${randomUUID()}`;

  /** Root (10,000) -> B (funded 6,000) -> S (funded 4,000 from B, then closed by B's agent with keep_funds). */
  async function keptBelow() {
    const life = await budgetUnderRoot(stack, { parentCents: 10_000n });
    await stack.clients.budgets.fundBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId, amountCents: 10_000n, idempotencyKey: key() });
    const bToken = await grantFor(stack, life.child, { stepUp: true });
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: bToken, ...budgetParams() });
    const s: TestOwner = { userId: life.owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    await stack.clients.budgets.fundBudget({ accessToken: bToken, vaultId: s.vaultId, amountCents: 4_000n, idempotencyKey: key() });
    await stack.clients.budgets.closeBudget({ accessToken: bToken, vaultId: s.vaultId, keepFunds: true });
    return { ...life, bToken, s };
  }
  const balances = (...vaults: string[]) => Promise.all(vaults.map((v) => balanceOf(stack, v)));

  it("closing the parent sweeps what the closed sub-budget kept, audited as a sweep; keep_funds on the parent keeps both", async () => {
    const t = await keptBelow();
    expect(await balances(t.owner.vaultId, t.child.vaultId, t.s.vaultId)).to.deep.equal([0, 6_000, 4_000]);
    const closed = await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId });
    expect(closed.sweptCents).to.equal(10_000n);
    expect(await balances(t.owner.vaultId, t.child.vaultId, t.s.vaultId)).to.deep.equal([10_000, 0, 0]);
    const sweeps = await stack.core.db("audit_records").where({ action: "agent.budget.sweep", subject: t.s.vaultId });
    expect(sweeps.map((a) => a.actor)).to.deep.equal([`agent:${t.owner.agentPrincipalId}`]);
    expect(await strandedVaults(stack)).to.not.include(t.s.vaultId);

    const kept = await keptBelow();
    const keeping = await stack.clients.budgets.closeBudget({ accessToken: kept.parentToken, vaultId: kept.child.vaultId, keepFunds: true });
    expect(keeping.sweptCents).to.equal(0n);
    expect(await balances(kept.owner.vaultId, kept.child.vaultId, kept.s.vaultId)).to.deep.equal([0, 6_000, 4_000]);
    await expectLedgerBalanced(stack);
  });

  it("the agent that kept the money cannot reach it once its own budget is closed; the owner still sweeps it", async () => {
    const t = await keptBelow();
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, keepFunds: true });
    await expectRefused(stack.clients.budgets.sweepBudget({ accessToken: t.bToken, vaultId: t.s.vaultId }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.budgets.closeBudget({ accessToken: t.bToken, vaultId: t.s.vaultId }), Reason.INVALID_TOKEN);
    expect(await balances(t.child.vaultId, t.s.vaultId)).to.deep.equal([6_000, 4_000]);
    const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
    expect((await stack.clients.budgets.sweepBudget({ sessionToken: session, vaultId: t.child.vaultId })).sweptCents).to.equal(10_000n);
    await expectLedgerBalanced(stack);
  });

  it("a parent's close racing sweeps of the kept money moves it exactly once (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    for (let round = 0; round < 4; round++) {
      const t = await keptBelow();
      const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
      const calls: Promise<unknown>[] = [
        ...Array.from({ length: 4 }, () => stack.clients.budgets.sweepBudget({ sessionToken: session, vaultId: t.s.vaultId })),
        ...Array.from({ length: 4 }, () => stack.clients.budgets.sweepBudget({ accessToken: t.bToken, vaultId: t.s.vaultId })),
      ];
      calls.splice(round, 0, stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId }));
      for (const r of await Promise.allSettled(calls)) {
        // Only the revoked grant of B's agent is refused; nothing fails otherwise.
        if (r.status === "rejected") expect(reasonOf(r.reason)).to.equal(Reason.INVALID_TOKEN);
      }
      expect(await balances(t.owner.vaultId, t.child.vaultId, t.s.vaultId)).to.deep.equal([10_000, 0, 0]);
    }
    await expectLedgerBalanced(stack);
  });
});
