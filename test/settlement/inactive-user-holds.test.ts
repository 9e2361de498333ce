import { expect } from "chai";
import { PaymentStatus } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { settlementHeld } from "../../core/settlement/metrics.js";
import type { Anvil } from "../support/anvil.js";
import { balanceOf, expectLedgerBalanced } from "../support/budget-life.js";
import { grantFor, payment } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { freshAddress, startEvmRailStack } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, settlementOf, fundedBaseBudget, signedTransactions } from "../support/late-refunds.js";
import { reasonOf } from "../support/refusals.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * While its user's account is not active, a payment accepted and not yet signed is held: nothing is
 * signed or sent. Active again before it expires, it is paid; past its expiry, it fails and is refunded.
 */
describe("payments of a user whose account is not active are held (anvil)", function () {
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
  const heldCount = async () => (await settlementHeld.get()).values.find((v) => v.labels.chain === "base")?.value ?? 0;
  const setStatus = (userId: string, status: "active" | "inactive") => stack.admin.partnerResources.setUserStatus({ userId, status });

  it("deactivated: the unsigned payment is held, nothing signed; active again, it is paid", async () => {
    const t = await fundedBaseBudget(stack);
    const held = await payFrom(stack, t.child, 1_200);
    const heldBefore = await heldCount();
    await setStatus(t.owner.userId, "inactive");
    await settle();
    await settle();
    expect(await settlementOf(stack, held)).to.equal("pending:null");
    expect(await signedTransactions(stack, held)).to.equal(0);
    // The operator is told: the user's agents and pages, where a payment is shown, are shut meanwhile.
    expect(await heldCount()).to.equal(heldBefore + 2);
    await setStatus(t.owner.userId, "active");
    await settle();
    await anvil.mine(4);
    await settle();
    expect(await settlementOf(stack, held)).to.equal("completed:null");
    expect(await balanceOf(stack, t.child.vaultId)).to.equal(6_000 - 1_200);
    await expectLedgerBalanced(stack);
  });

  it("held past its expiry: it fails as expired, never signed, and is refunded", async () => {
    const t = await fundedBaseBudget(stack);
    const held = await payFrom(stack, t.child, 900);
    await setStatus(t.owner.userId, "inactive");
    await settle();
    stack.clock.advance(3_601_000);
    await settle();
    expect(await settlementOf(stack, held)).to.equal("failed:expired");
    expect(await signedTransactions(stack, held)).to.equal(0);
    expect(await balanceOf(stack, t.child.vaultId)).to.equal(6_000);
    await expectLedgerBalanced(stack);
  });

  it("a payment signed before the deactivation is paid as ever", async () => {
    const t = await fundedBaseBudget(stack);
    const signed = await payFrom(stack, t.child, 500);
    await settle();
    await setStatus(t.owner.userId, "inactive");
    await anvil.mine(4);
    await settle();
    expect(await settlementOf(stack, signed)).to.equal("completed:null");
    await expectLedgerBalanced(stack);
  });

  it("the agent paying while the operator deactivates its user and passes race: nothing unsigned then is signed until the account is active (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent passes and an operator's change need concurrent transactions");
    const t = await fundedBaseBudget(stack);
    const agentToken = await grantFor(stack, t.child);
    const pay = () =>
      stack.clients.budgets.initiatePayment({
        accessToken: agentToken,
        payment: payment({ amountCents: 100n, address: freshAddress(), idempotencyKey: idempotencyKey() }),
      });
    const before = await Promise.all(Array.from({ length: 8 }, () => pay()));
    const racing = Promise.allSettled(Array.from({ length: 12 }, () => pay()));
    await Promise.all([setStatus(t.owner.userId, "inactive"), settle(), settle(), settle()]);
    const during = await racing;
    // Refused once the change committed: the grant's user is not active.
    for (const r of during) if (r.status === "rejected") expect(reasonOf(r.reason), String(r.reason)).to.equal(Reason.INVALID_TOKEN);
    const accepted = [...before, ...during.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []))].map((r) => {
      expect(r.payment!.status).to.equal(PaymentStatus.PENDING);
      return r.payment!.paymentId;
    });
    const unsignedAfter = new Set<string>();
    for (const id of accepted) if ((await signedTransactions(stack, id)) === 0) unsignedAfter.add(id);
    await Promise.all([settle(), settle(), settle()]);
    for (const id of unsignedAfter) expect(await signedTransactions(stack, id), id).to.equal(0);
    await setStatus(t.owner.userId, "active");
    for (let i = 0; i < 2; i++) await settle();
    await anvil.mine(4);
    for (let i = 0; i < 2; i++) await settle();
    for (const id of accepted) expect(await settlementOf(stack, id), id).to.equal("completed:null");
    expect(await balanceOf(stack, t.child.vaultId)).to.equal(6_000 - 100 * accepted.length);
    await expectLedgerBalanced(stack);
  });
});
