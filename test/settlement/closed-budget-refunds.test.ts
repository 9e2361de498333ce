import { expect } from "chai";
import type { Hex } from "viem";
import type { Anvil } from "../support/anvil.js";
import { grantFor } from "../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../support/budget-life.js";
import { mineWithTokenCode, startEvmRailStack } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, refundSweeps, replayFailure, REVERTS, settlementOf, strandedVaults, subBudget } from "../support/late-refunds.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * A payment on the evm rail that fails after its budget was closed: the refund follows the close.
 * Closed without keep_funds, it goes on up to the parent vault; closed with keep_funds, it stays.
 */
describe("refunds into closed budgets (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let usdc: Hex;
  let stack: TestStack;

  before(async () => {
    ({ anvil, usdc, stack } = await startEvmRailStack(startStack, 10_000_000, { provisioningLimitPerMinute: 1000 }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const settle = () => stack.core.settlement.worker.runOnce();
  const fund = (accessToken: string, vaultId: string, amountCents: bigint) =>
    stack.clients.budgets.fundBudget({ accessToken, vaultId, amountCents, idempotencyKey: idempotencyKey() });
  const balances = (...vaults: string[]) => Promise.all(vaults.map((v) => balanceOf(stack, v)));
  /** Past every payment's expiry: the next pass fails the unsigned ones as expired. */
  const expire = async () => {
    stack.clock.advance(3_601_000);
    await settle();
  };

  /** The user's vault (10,000), a budget B on base funded 6,000 from it, and a payment of `cents` from B. */
  async function paidFromBudget(cents: number) {
    const life = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
    await fund(life.parentToken, life.child.vaultId, 6_000n);
    return { ...life, paymentId: await payFrom(stack, life.child, cents) };
  }

  it("closed without keep_funds: a transfer that reverts after the close is refunded up to the parent vault, nothing stranded", async () => {
    const t = await paidFromBudget(1_500);
    await anvil.setAutomine(false);
    await settle(); // signed and sent, not mined
    expect(await settlementOf(stack, t.paymentId)).to.equal("submitted:null");
    const closed = await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId });
    expect(closed.sweptCents).to.equal(4_500n);
    await mineWithTokenCode(anvil, usdc, REVERTS);
    await anvil.setAutomine(true);
    await anvil.mine(3); // a failure refunds for good, so it waits for finality (4 blocks here)
    await settle();
    expect(await settlementOf(stack, t.paymentId)).to.equal("failed:reverted");
    expect(await balances(t.owner.vaultId, t.child.vaultId)).to.deep.equal([10_000, 0]);
    expect(await refundSweeps(stack, [t.child.vaultId])).to.deep.equal([{ subject: t.child.vaultId, actor: "settlement", reason: "payment_refund" }]);
    expect(await strandedVaults(stack)).to.not.include(t.child.vaultId);
    await expectLedgerBalanced(stack);
  });

  it("closed with keep_funds: the refund stays in the closed budget, listed as stranded; once the owner sweeps, a later refund goes up", async () => {
    const t = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
    await fund(t.parentToken, t.child.vaultId, 6_000n);
    const later = await payFrom(stack, t.child, 500);
    await anvil.setAutomine(false);
    await settle(); // signed and sent, not mined
    const unsigned = await payFrom(stack, t.child, 1_000);
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, keepFunds: true });
    await settle(); // the payment still unsigned at the close is cancelled, never signed
    expect([await settlementOf(stack, unsigned), await settlementOf(stack, later)]).to.deep.equal(["failed:cancelled", "submitted:null"]);
    expect(await balances(t.owner.vaultId, t.child.vaultId)).to.deep.equal([4_000, 5_500]);
    expect(await strandedVaults(stack)).to.include(t.child.vaultId);
    expect(await refundSweeps(stack, [t.child.vaultId])).to.deep.equal([]);
    await expectLedgerBalanced(stack);

    const swept = await stack.clients.budgets.sweepBudget({ accessToken: await grantFor(stack, t.owner, { stepUp: true }), vaultId: t.child.vaultId });
    expect(swept.sweptCents).to.equal(5_500n);
    await mineWithTokenCode(anvil, usdc, REVERTS);
    await anvil.setAutomine(true);
    await anvil.mine(3);
    await settle();
    expect(await settlementOf(stack, later)).to.equal("failed:reverted");
    expect(await balances(t.owner.vaultId, t.child.vaultId)).to.deep.equal([10_000, 0]);
    expect(await strandedVaults(stack)).to.not.include(t.child.vaultId);
    await expectLedgerBalanced(stack);
  });

  it("a tree closed from above: refunds into budgets below climb every closed level to the top budget's parent", async () => {
    const t = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
    await fund(t.parentToken, t.child.vaultId, 8_000n);
    const bToken = await grantFor(stack, t.child, { stepUp: true });
    // S1 open when B closes; S2 closed before by B's agent, keeping its money.
    const s1 = await subBudget(stack, t.owner, bToken, 3_000n);
    const s2 = await subBudget(stack, t.owner, bToken, 2_000n);
    const [p1, p2, pB] = [await payFrom(stack, s1, 700), await payFrom(stack, s2, 400), await payFrom(stack, t.child, 100)];
    await stack.clients.budgets.closeBudget({ accessToken: bToken, vaultId: s2.vaultId, keepFunds: true });
    const closed = await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId });
    expect(closed.sweptCents).to.equal(8_000n - 1_200n);
    await expire();
    expect(await Promise.all([p1, p2, pB].map((p) => settlementOf(stack, p)))).to.deep.equal(["failed:expired", "failed:expired", "failed:expired"]);
    expect(await balances(t.owner.vaultId, t.child.vaultId, s1.vaultId, s2.vaultId)).to.deep.equal([10_000, 0, 0, 0]);
    const sweeps = await refundSweeps(stack, [t.child.vaultId, s1.vaultId, s2.vaultId]);
    expect(sweeps.map((s) => s.subject).sort()).to.deep.equal([s1.vaultId, s2.vaultId, t.child.vaultId, t.child.vaultId, t.child.vaultId].sort());
    const stranded = await strandedVaults(stack);
    for (const v of [t.child.vaultId, s1.vaultId, s2.vaultId]) expect(stranded).to.not.include(v);
    await expectLedgerBalanced(stack);
  });

  it("a tree closed from above with keep_funds: refunds below stop at the first budget that kept its money", async () => {
    const t = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
    await fund(t.parentToken, t.child.vaultId, 8_000n);
    const bToken = await grantFor(stack, t.child, { stepUp: true });
    const s = await subBudget(stack, t.owner, bToken, 3_000n);
    const paid = await payFrom(stack, s, 700);
    // S closed first, sending its money up; then B closed keeping its own.
    await stack.clients.budgets.closeBudget({ accessToken: bToken, vaultId: s.vaultId });
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, keepFunds: true });
    await expire();
    expect(await settlementOf(stack, paid)).to.equal("failed:expired");
    expect(await balances(t.owner.vaultId, t.child.vaultId, s.vaultId)).to.deep.equal([2_000, 8_000, 0]);
    expect(await strandedVaults(stack)).to.include(t.child.vaultId);
    await expectLedgerBalanced(stack);
  });

  it("a hostile replay of a refund's status change moves nothing twice, nor sweeps a refund a close already swept", async () => {
    const t = await paidFromBudget(1_500);
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId });
    await expire();
    expect(await balances(t.owner.vaultId, t.child.vaultId)).to.deep.equal([10_000, 0]);
    for (let i = 0; i < 2; i++) {
      await replayFailure(stack, t.paymentId);
      await settle();
      expect(await settlementOf(stack, t.paymentId)).to.equal("failed:expired");
    }
    expect(await balances(t.owner.vaultId, t.child.vaultId)).to.deep.equal([10_000, 0]);
    expect(await refundSweeps(stack, [t.child.vaultId])).to.have.length(1);

    // Refunded while the budget was open, then swept by its close: a replay finds nothing to move.
    const open = await paidFromBudget(1_500);
    await expire();
    expect(await balances(open.owner.vaultId, open.child.vaultId)).to.deep.equal([4_000, 6_000]);
    await stack.clients.budgets.closeBudget({ accessToken: await grantFor(stack, open.owner, { stepUp: true }), vaultId: open.child.vaultId });
    await replayFailure(stack, open.paymentId);
    await settle();
    expect(await settlementOf(stack, open.paymentId)).to.equal("failed:expired");
    expect(await balances(open.owner.vaultId, open.child.vaultId)).to.deep.equal([10_000, 0]);
    expect(await refundSweeps(stack, [open.child.vaultId])).to.deep.equal([]);
    await expectLedgerBalanced(stack);
  });
});
