import { expect } from "chai";
import { PaymentStatus } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { Anvil } from "../support/anvil.js";
import { balanceOf, expectLedgerBalanced } from "../support/budget-life.js";
import { grantFor, ownerSession, payment } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { freshAddress, startEvmRailStack } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, refundSweeps, settlementOf, strandedVaults, fundedBaseBudget, signedTransactions } from "../support/late-refunds.js";
import { reasonOf } from "../support/refusals.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * A payment accepted on the evm rail and not yet signed when its budget closes, or when the grant that
 * made it is revoked, is never paid: it is cancelled and refunded.
 */
describe("payments stopped before they are signed (anvil)", function () {
  this.timeout(180_000);
  let anvil: Anvil;
  let stack: TestStack;

  before(async () => {
    ({ anvil, stack } = await startEvmRailStack(startStack, 10_000_000, { provisioningLimitPerMinute: 1000 }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const settle = () => stack.core.settlement.worker.runOnce();
  /** The user's vault (10,000) and a budget B on base funded 6,000 from it. */

  it("closed without keep_funds: the unsigned payment fails as cancelled, nothing is signed, its refund goes up to the parent", async () => {
    const t = await fundedBaseBudget(stack);
    const unsigned = await payFrom(stack, t.child, 1_500);
    const closed = await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId });
    expect(closed.sweptCents).to.equal(4_500n);
    await settle();
    expect(await settlementOf(stack, unsigned)).to.equal("failed:cancelled");
    expect(await signedTransactions(stack, unsigned)).to.equal(0);
    expect(await balanceOf(stack, t.owner.vaultId)).to.equal(10_000);
    expect(await refundSweeps(stack, [t.child.vaultId])).to.have.length(1);
    const audit = await stack.core.db("audit_records").where({ subject: unsigned, action: "payments.settlement.failed" }).select("outcome", "reason");
    expect(audit).to.deep.equal([{ outcome: "failure", reason: "cancelled" }]);
    await expectLedgerBalanced(stack);
  });

  it("closed with keep_funds: the cancelled payment's refund stays in the closed budget, listed as stranded", async () => {
    const t = await fundedBaseBudget(stack);
    const unsigned = await payFrom(stack, t.child, 1_000);
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, keepFunds: true });
    await settle();
    expect(await settlementOf(stack, unsigned)).to.equal("failed:cancelled");
    expect([await balanceOf(stack, t.owner.vaultId), await balanceOf(stack, t.child.vaultId)]).to.deep.equal([4_000, 6_000]);
    expect(await strandedVaults(stack)).to.include(t.child.vaultId);
    await expectLedgerBalanced(stack);
  });

  it("a payment signed before the close is paid as ever", async () => {
    const t = await fundedBaseBudget(stack);
    const signed = await payFrom(stack, t.child, 700);
    await settle();
    await stack.clients.budgets.closeBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId });
    await anvil.mine(4);
    await settle();
    expect(await settlementOf(stack, signed)).to.equal("completed:null");
    expect(await balanceOf(stack, t.owner.vaultId)).to.equal(10_000 - 700);
    await expectLedgerBalanced(stack);
  });

  it("the owner's kill switch cancels an unsigned payment of an open budget: refunded into it; a signed one is paid", async () => {
    const t = await fundedBaseBudget(stack);
    const signed = await payFrom(stack, t.child, 300);
    await settle();
    const unsigned = await payFrom(stack, t.child, 1_000);
    await stack.clients.grants.killSwitch({ sessionToken: await ownerSession(stack, t.owner.userId) });
    await anvil.mine(4);
    await settle();
    expect([await settlementOf(stack, unsigned), await settlementOf(stack, signed)]).to.deep.equal(["failed:cancelled", "completed:null"]);
    expect(await signedTransactions(stack, unsigned)).to.equal(0);
    expect(await balanceOf(stack, t.child.vaultId)).to.equal(6_000 - 300);
    await expectLedgerBalanced(stack);
  });

  it("a refresh is no revocation: the payment made under the grant it replaced is paid", async () => {
    const t = await fundedBaseBudget(stack);
    const issued = (await stack.admin.grants.issueGrant({ userId: t.owner.userId, vaultId: t.child.vaultId, scopes: ["payments:initiate"] })).token!;
    const { payment: made } = await stack.clients.budgets.initiatePayment({
      accessToken: issued.accessToken,
      payment: payment({ amountCents: 400n, address: freshAddress(), idempotencyKey: idempotencyKey() }),
    });
    await stack.admin.grants.refreshGrant({ refreshToken: issued.refreshToken });
    await settle();
    await anvil.mine(4);
    await settle();
    expect(await settlementOf(stack, made!.paymentId)).to.equal("completed:null");
  });

  for (const end of ["close", "kill switch"] as const)
    it(`the budget's agent paying while its owner pulls the ${end} and workers settle: each payment paid or cancelled, never both (PostgreSQL only)`, async function () {
      requirePostgres(this, "concurrent workers and an owner's action need concurrent transactions");
      const t = await fundedBaseBudget(stack);
      const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
      const agentToken = await grantFor(stack, t.child);
      const pay = () =>
        stack.clients.budgets.initiatePayment({
          accessToken: agentToken,
          payment: payment({ amountCents: 100n, address: freshAddress(), idempotencyKey: idempotencyKey() }),
        });
      const before = await Promise.all(Array.from({ length: 8 }, () => pay()));
      // The hostile agent keeps paying through the owner's action, which races three settlement passes.
      const racing = Promise.allSettled(Array.from({ length: 12 }, () => pay()));
      const stop =
        end === "close"
          ? stack.clients.budgets.closeBudget({ sessionToken: session, vaultId: t.child.vaultId })
          : stack.clients.grants.killSwitch({ sessionToken: session });
      await Promise.all([stop, settle(), settle(), settle()]);
      const during = await racing;
      // Refused once the owner's action committed: the budget's policy is frozen, or its agent's grant revoked.
      for (const r of during)
        if (r.status === "rejected") expect([Reason.POLICY_DENIED, Reason.INVALID_TOKEN], String(r.reason)).to.include(reasonOf(r.reason));
      const accepted = [...before, ...during.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []))].map((r) => {
        expect(r.payment!.status).to.equal(PaymentStatus.PENDING);
        return r.payment!.paymentId;
      });
      // Unsigned now, after the owner's action: never signed.
      const unsignedAfter = new Set<string>();
      for (const id of accepted) if ((await signedTransactions(stack, id)) === 0) unsignedAfter.add(id);
      // Twice each: what the race left pending is signed or cancelled, then every transfer is deep enough.
      for (let i = 0; i < 2; i++) await settle();
      await anvil.mine(4);
      for (let i = 0; i < 2; i++) await settle();
      const outcomes = await Promise.all(accepted.map((id) => settlementOf(stack, id)));
      for (const [i, id] of accepted.entries()) expect(outcomes[i], id).to.equal(unsignedAfter.has(id) ? "failed:cancelled" : "completed:null");
      for (const [i, id] of accepted.entries())
        expect((await signedTransactions(stack, id)) > 0, `${id} signed iff paid`).to.equal(outcomes[i] === "completed:null");
      const paid = outcomes.filter((o) => o === "completed:null").length * 100;
      const [owner, child] = [await balanceOf(stack, t.owner.vaultId), await balanceOf(stack, t.child.vaultId)];
      expect([owner, child]).to.deep.equal(end === "close" ? [10_000 - paid, 0] : [4_000, 6_000 - paid]);
      await expectLedgerBalanced(stack);
    });
});
