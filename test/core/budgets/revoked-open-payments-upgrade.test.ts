import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { up as declineRevokedOpenPayments } from "../../../core/db/migrations/0046-decline-revoked-open-payments.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { ownerSession } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";
import { balanceOf, expectLedgerBalanced, waitingPayment } from "../../support/budget-life.js";

/** Payments an older release left open under a revoked grant are declined on upgrade; others are left as they are. */
describe("Open payments of grants an older release revoked", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const pendingPayment = () => waitingPayment(stack);

  /** Revokes the payment's lineage as older releases did: the grants only, the payment left open. */
  async function revokeOldStyle(paymentId: string) {
    const { grant_id } = await stack.core.db("agent_payments").where({ id: paymentId }).first("grant_id");
    const { lineage_id } = await stack.core.db("grants").where({ id: grant_id }).first("lineage_id");
    await stack.core.db("grants").where({ lineage_id }).update({ state: "revoked", state_changed_at: stack.clock(), state_reason: "client_revocation" });
  }

  const statusOf = async (paymentId: string) => (await stack.core.db("agent_payments").where({ id: paymentId }).first("status")).status as string;

  it("declines those waiting for step-up or approved and not repeated, moves no money, and leaves a live grant's payment open", async () => {
    const waiting = await pendingPayment();
    const approved = await pendingPayment();
    const live = await pendingPayment();
    await stack.clients.budgets.approvePayment({
      sessionToken: await ownerSession(stack, approved.owner.userId, { stepUp: true }),
      paymentId: approved.paymentId,
    });
    expect(await statusOf(approved.paymentId)).to.equal("approved");
    await revokeOldStyle(waiting.paymentId);
    await revokeOldStyle(approved.paymentId);
    const before = await Promise.all([waiting, approved, live].map((x) => balanceOf(stack, x.child.vaultId)));

    await declineRevokedOpenPayments(stack.core.db);
    await declineRevokedOpenPayments(stack.core.db); // a second run finds nothing more

    expect([await statusOf(waiting.paymentId), await statusOf(approved.paymentId), await statusOf(live.paymentId)]).to.deep.equal([
      "declined",
      "declined",
      "pending_step_up",
    ]);
    expect(await Promise.all([waiting, approved, live].map((x) => balanceOf(stack, x.child.vaultId)))).to.deep.equal(before);
    const session = await ownerSession(stack, waiting.owner.userId, { stepUp: true });
    await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: waiting.paymentId }), Reason.NOT_FOUND);
    await expectLedgerBalanced(stack);
  });
});
