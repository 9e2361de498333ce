import { expect } from "chai";
import { getContractAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { ANVIL_DEPLOYER_KEY } from "../../cli/local-chain.js";
import { PaymentStatus } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { freshWalletKeyFile, startAnvil, type Anvil } from "../support/anvil.js";
import { balanceOf, expectLedgerBalanced } from "../support/budget-life.js";
import { grantFor, ownerSession, payment } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { evmChainSettings, evmRailStackOptions, freshAddress, fundHotWallet } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, refundSweeps, settlementOf, fundedBaseBudget } from "../support/late-refunds.js";
import { freePort } from "../support/ports.js";
import { reasonOf } from "../support/refusals.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * A payment no core here can sign (its chain's node has not answered since the start) waits for the
 * node; a close or revocation still stops it at once: cancelled and refunded, not left until expiry.
 */
describe("payments of a chain whose node is down, stopped by a close or revocation", function () {
  this.timeout(120_000);
  let port: number;
  let stack: TestStack;
  let anvil: Anvil | undefined;
  // Where anvil's first deployment lands: the USDC deployed once the node is up.
  const usdc = getContractAddress({ from: privateKeyToAccount(ANVIL_DEPLOYER_KEY).address, nonce: 0n });

  before(async () => {
    port = await freePort();
    const settings = evmChainSettings(`http://127.0.0.1:${port}`, usdc, { rpcTimeoutMs: 500, walletKeyFile: await freshWalletKeyFile() });
    const options = evmRailStackOptions(settings);
    stack = await startStack({ ...options, provisioningLimitPerMinute: 1000, settlementWorker: { ...options.settlementWorker, batchSize: 4 } });
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const settle = () => stack.core.settlement.worker.runOnce();
  /** Passes enough for the walk to go round every unsigned payment, a page of 4 a pass. */
  const settleAll = async () => {
    for (let i = 0; i < 12; i++) await settle();
  };
  const dueAt = async (id: string) => (await stack.core.db("settlement_payments").where({ payment_id: id }).first("next_attempt_at")).next_attempt_at;

  it("closed: the unsigned payment is cancelled before its expiry, its refund up to the parent; another budget's waits for the node, due as it was", async () => {
    const closing = await fundedBaseBudget(stack);
    const open = await fundedBaseBudget(stack);
    const stopped = await payFrom(stack, closing.child, 1_500);
    const waiting = await payFrom(stack, open.child, 800);
    const due = await dueAt(waiting);
    await stack.clients.budgets.closeBudget({ accessToken: closing.parentToken, vaultId: closing.child.vaultId });
    await settleAll();
    expect(await settlementOf(stack, stopped)).to.equal("failed:cancelled");
    expect(await balanceOf(stack, closing.owner.vaultId)).to.equal(10_000);
    expect(await refundSweeps(stack, [closing.child.vaultId])).to.have.length(1);
    expect(await settlementOf(stack, waiting)).to.equal("pending:null");
    expect(await dueAt(waiting)).to.deep.equal(due);
    await expectLedgerBalanced(stack);
  });

  it("the owner's kill switch cancels it, refunded into the open budget", async () => {
    const t = await fundedBaseBudget(stack);
    const stopped = await payFrom(stack, t.child, 1_000);
    await stack.clients.grants.killSwitch({ sessionToken: await ownerSession(stack, t.owner.userId) });
    await settleAll();
    expect(await settlementOf(stack, stopped)).to.equal("failed:cancelled");
    expect(await balanceOf(stack, t.child.vaultId)).to.equal(6_000);
    const audit = await stack.core.db("audit_records").where({ subject: stopped, action: "payments.settlement.failed" }).select("outcome", "reason");
    expect(audit).to.deep.equal([{ outcome: "failure", reason: "cancelled" }]);
    await expectLedgerBalanced(stack);
  });

  it("the budget's agent paying while its owner closes it and passes race: every payment cancelled once, all the money back (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent passes and an owner's close need concurrent transactions");
    const t = await fundedBaseBudget(stack);
    const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
    const agentToken = await grantFor(stack, t.child);
    const pay = () =>
      stack.clients.budgets.initiatePayment({
        accessToken: agentToken,
        payment: payment({ amountCents: 100n, address: freshAddress(), idempotencyKey: idempotencyKey() }),
      });
    const before = await Promise.all(Array.from({ length: 8 }, () => pay()));
    const racing = Promise.allSettled(Array.from({ length: 12 }, () => pay()));
    await Promise.all([stack.clients.budgets.closeBudget({ sessionToken: session, vaultId: t.child.vaultId }), settle(), settle(), settle()]);
    const during = await racing;
    // Refused once the close committed: the budget's policy is frozen and its agent's grant revoked.
    for (const r of during) if (r.status === "rejected") expect([Reason.POLICY_DENIED, Reason.INVALID_TOKEN], String(r.reason)).to.include(reasonOf(r.reason));
    const accepted = [...before, ...during.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []))].map((r) => {
      expect(r.payment!.status).to.equal(PaymentStatus.PENDING);
      return r.payment!.paymentId;
    });
    await Promise.all([settleAll(), settleAll(), settleAll()]);
    for (const id of accepted) expect(await settlementOf(stack, id), id).to.equal("failed:cancelled");
    const failures = await stack.core
      .db("audit_records")
      .whereIn("subject", accepted)
      .where({ action: "payments.settlement.failed" })
      .count<{ n: string }[]>("* as n");
    expect(Number(failures[0]!.n)).to.equal(accepted.length);
    expect([await balanceOf(stack, t.owner.vaultId), await balanceOf(stack, t.child.vaultId)]).to.deep.equal([10_000, 0]);
    await expectLedgerBalanced(stack);
  });

  it("once the node answers, the payment no one stopped is paid", async () => {
    const t = await fundedBaseBudget(stack);
    const waiting = await payFrom(stack, t.child, 600);
    anvil = await startAnvil({ port });
    expect((await anvil.deployUsdc()).toLowerCase()).to.equal(usdc.toLowerCase());
    await fundHotWallet(anvil, usdc, stack.core.settlement.evm("base")!.wallet, centsToUnits(10_000));
    let ready = false;
    for (let i = 0; i < 200 && !ready; i++) {
      if (i > 0) await new Promise((resolve) => setTimeout(resolve, 50));
      ready = await stack.core.settlement.ready();
    }
    expect(ready).to.equal(true);
    await settleAll();
    await anvil.mine(4);
    await settleAll();
    expect(await settlementOf(stack, waiting)).to.equal("completed:null");
    await expectLedgerBalanced(stack);
  });
});
