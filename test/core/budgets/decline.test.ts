import { expect } from "chai";
import { Code } from "@connectrpc/connect";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { waitingPayment } from "../../support/budget-life.js";

/** BudgetsService.DeclinePayment / DeclineBudget (docs/reference/agent-oauth.md, "Pending approvals"). */
describe("BudgetsService declines", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const pendingPayment = () => waitingPayment(stack);

  it("a decline and an approval racing on one payment: exactly one decides", async () => {
    for (let i = 0; i < 5; i++) {
      const { owner, paymentId } = await pendingPayment();
      const sessionToken = await ownerSession(stack, owner.userId, { stepUp: true });
      const results = await Promise.allSettled([
        stack.clients.budgets.approvePayment({ sessionToken, paymentId }),
        stack.clients.budgets.declinePayment({ sessionToken, paymentId }),
      ]);
      const decided = await stack.core.db("audit_records").whereIn("action", ["payments.approve", "payments.decline"]).where({ subject: paymentId });
      expect(decided).to.have.length(1);
      const row = await stack.core.db("agent_payments").where({ id: paymentId }).first();
      expect(row.status).to.equal(decided[0].action === "payments.approve" ? "approved" : "declined");
      expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
    }
  });

  it("declining clears the step_up_url, is idempotent, and is NOT_FOUND once approved or for a stranger", async () => {
    const { owner, child, p, paymentId } = await pendingPayment();
    const stranger = await createOwner(stack);
    const strangerSession = await ownerSession(stack, stranger.userId);
    await expectRefused(stack.clients.budgets.declinePayment({ sessionToken: strangerSession, paymentId }), Reason.NOT_FOUND);
    await expectRefused(stack.clients.budgets.declinePayment({ sessionToken: "", paymentId }), Reason.INVALID_TOKEN);
    const sessionToken = await ownerSession(stack, owner.userId);
    await expectRefused(stack.clients.budgets.declinePayment({ sessionToken, paymentId: "x'; --" }), Reason.NOT_FOUND);
    const { payment: declined } = await stack.clients.budgets.declinePayment({ sessionToken, paymentId });
    expect(declined!.status).to.equal(PaymentStatus.DECLINED);
    expect(declined!.stepUpUrl).to.equal("");
    expect((await stack.clients.budgets.declinePayment({ sessionToken, paymentId })).payment!.status).to.equal(PaymentStatus.DECLINED);
    const row = await stack.core.db("agent_payments").where({ id: paymentId }).first();
    expect(row.declined_at).to.not.equal(null);
    const replay = await refusalOf(stack.clients.budgets.initiatePayment({ accessToken: await grantFor(stack, child), payment: p }));
    expect([replay.code, replay.detail?.reason, replay.message]).to.deep.equal([
      Code.PermissionDenied,
      Reason.ACCESS_DENIED,
      "the vault owner declined this payment",
    ]);
    expect((await stack.clients.budgets.listPendingApprovals({ sessionToken })).pendingPayments).to.have.length(0);

    const other = await pendingPayment();
    const otherSession = await ownerSession(stack, other.owner.userId, { stepUp: true });
    await stack.clients.budgets.approvePayment({ sessionToken: otherSession, paymentId: other.paymentId });
    await expectRefused(stack.clients.budgets.declinePayment({ sessionToken: otherSession, paymentId: other.paymentId }), Reason.NOT_FOUND);
  });

  it("a declined draft budget cannot be activated; an active one cannot be declined", async () => {
    const owner = await createOwner(stack);
    const params = budgetParams();
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    expect(budget!.status).to.equal(BudgetStatus.DRAFT);
    const req = { sessionToken: await ownerSession(stack, owner.userId, { stepUp: true }), agentPrincipalId: budget!.agentPrincipalId };
    const stranger = await ownerSession(stack, (await createOwner(stack)).userId);
    await expectRefused(stack.clients.budgets.declineBudget({ ...req, sessionToken: stranger }), Reason.NOT_FOUND);
    expect((await stack.clients.budgets.declineBudget(req)).budget!.status).to.equal(BudgetStatus.DECLINED);
    expect((await stack.clients.budgets.declineBudget(req)).budget!.status).to.equal(BudgetStatus.DECLINED);
    expect(await stack.core.db("audit_records").where({ action: "agent.budget.decline", subject: budget!.agentPrincipalId })).to.have.length(1);
    await expectRefused(stack.clients.budgets.activateBudget(req), Reason.NOT_FOUND);
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params }), Reason.ACCESS_DENIED);
    expect((await stack.clients.budgets.listPendingApprovals({ sessionToken: req.sessionToken })).draftBudgets).to.have.length(0);

    const active = (await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...budgetParams() })).budget!;
    await expectRefused(stack.clients.budgets.declineBudget({ sessionToken: req.sessionToken, agentPrincipalId: active.agentPrincipalId }), Reason.NOT_FOUND);
  });
});
