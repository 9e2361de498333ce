import { expect } from "chai";
import { BudgetStatus } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import type { Anvil } from "../support/anvil.js";
import { budgetParams, grantFor, ownerSession } from "../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../support/budget-life.js";
import { startEvmRailStack } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, refundSweeps, settlementOf, strandedVaults, subBudget } from "../support/late-refunds.js";
import { startStack, type TestStack } from "../support/stack.js";

/** A declined draft already sent its money up: closing it later, with keep_funds or not, never stops a refund there. */
describe("refunds below a declined budget closed afterwards (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let stack: TestStack;

  before(async () => {
    ({ anvil, stack } = await startEvmRailStack(startStack, 10_000_000, { provisioningLimitPerMinute: 1000 }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const balances = (...vaults: string[]) => Promise.all(vaults.map((v) => balanceOf(stack, v)));

  /** The user's vault (10,000), a draft D funded 6,000 by the owner, S under D funded 3,000, a payment of 700 from S; then D declined. */
  async function declinedWithRefundDue() {
    const t = await budgetUnderRoot(stack, { parentCents: 10_000n, stepUp: false, budget: { chainAllowlist: ["base"] } });
    expect(t.budget.status).to.equal(BudgetStatus.DRAFT);
    const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
    await stack.clients.budgets.fundBudget({ sessionToken: session, vaultId: t.child.vaultId, amountCents: 6_000n, idempotencyKey: idempotencyKey() });
    const s = await subBudget(stack, t.owner, await grantFor(stack, t.child, { stepUp: true }), 3_000n);
    const paymentId = await payFrom(stack, s, 700);
    await stack.clients.budgets.declineBudget({ sessionToken: session, agentPrincipalId: t.child.agentPrincipalId });
    expect(await balances(t.owner.vaultId, t.child.vaultId, s.vaultId)).to.deep.equal([9_300, 0, 0]);
    return { ...t, s, paymentId, session };
  }

  for (const by of ["the parent's agent", "the owner"] as const) {
    it(`closed with keep_funds by ${by}: the declined budget still sends a later refund on up to the parent`, async () => {
      const t = await declinedWithRefundDue();
      const who = by === "the owner" ? { sessionToken: t.session } : { accessToken: t.parentToken };
      const closed = await stack.clients.budgets.closeBudget({ ...who, vaultId: t.child.vaultId, keepFunds: true });
      expect([closed.status, closed.sweptCents, closed.alreadyClosed]).to.deep.equal([BudgetStatus.CLOSED, 0n, false]);
      await stack.core.settlement.worker.runOnce(); // the unsigned payment of a closed budget is cancelled and refunded
      expect(await settlementOf(stack, t.paymentId)).to.equal("failed:cancelled");
      expect(await balances(t.owner.vaultId, t.child.vaultId, t.s.vaultId)).to.deep.equal([10_000, 0, 0]);
      expect((await refundSweeps(stack, [t.child.vaultId, t.s.vaultId])).map((r) => r.subject)).to.deep.equal([t.s.vaultId, t.child.vaultId]);
      expect(await strandedVaults(stack)).to.not.include(t.child.vaultId);
      await expectLedgerBalanced(stack);
    });
  }

  it("a declined budget below a budget closed with keep_funds still sends a later refund up to that budget", async () => {
    const b = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { chainAllowlist: ["base"] } });
    await stack.clients.budgets.fundBudget({ accessToken: b.parentToken, vaultId: b.child.vaultId, amountCents: 8_000n, idempotencyKey: idempotencyKey() });
    // D: a draft B's agent asked for without a step-up, funded by the owner; S under it pays 700, then D is declined.
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, b.child), ...budgetParams({ chainAllowlist: ["base"] }) });
    const d = { userId: b.owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    const session = await ownerSession(stack, b.owner.userId, { stepUp: true });
    await stack.clients.budgets.fundBudget({ sessionToken: session, vaultId: d.vaultId, amountCents: 6_000n, idempotencyKey: idempotencyKey() });
    const s = await subBudget(stack, b.owner, await grantFor(stack, d, { stepUp: true }), 3_000n);
    const paymentId = await payFrom(stack, s, 700);
    await stack.clients.budgets.declineBudget({ sessionToken: session, agentPrincipalId: d.agentPrincipalId });
    await stack.clients.budgets.closeBudget({ accessToken: b.parentToken, vaultId: b.child.vaultId, keepFunds: true });
    await stack.core.settlement.worker.runOnce();
    expect(await settlementOf(stack, paymentId)).to.equal("failed:cancelled");
    expect(await balances(b.owner.vaultId, b.child.vaultId, d.vaultId, s.vaultId)).to.deep.equal([2_000, 8_000, 0, 0]);
    expect(await strandedVaults(stack))
      .to.include(b.child.vaultId)
      .and.not.include(d.vaultId);
    await expectLedgerBalanced(stack);
  });

  it("a budget closed with keep_funds that was never declined still keeps a later refund", async () => {
    const t = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { ...budgetParams({ chainAllowlist: ["base"] }), stepUpAmountCents: undefined } });
    await stack.clients.budgets.fundBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, amountCents: 6_000n, idempotencyKey: idempotencyKey() });
    const paymentId = await payFrom(stack, t.child, 700);
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, keepFunds: true });
    await stack.core.settlement.worker.runOnce();
    expect(await settlementOf(stack, paymentId)).to.equal("failed:cancelled");
    expect(await balances(t.owner.vaultId, t.child.vaultId)).to.deep.equal([4_000, 6_000]);
    expect(await strandedVaults(stack)).to.include(t.child.vaultId);
  });
});
