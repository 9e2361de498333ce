import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Code } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Decision, PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { ALL_AGENT_SCOPES, budgetParams, createOwner, grantFor, ownerSession, payment, revokeGrant } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced, legsOf } from "../../support/budget-life.js";

/** BudgetsService.FundBudget and CloseBudget through core's Connect client: agents and owners. */
describe("BudgetsService budget life: fund and close", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  const key = () => `fund-${randomUUID()}`;
  const fund = (accessToken: string, vaultId: string, amountCents: bigint, idempotencyKey = key()) =>
    stack.clients.budgets.fundBudget({ accessToken, vaultId, amountCents, idempotencyKey });

  describe("FundBudget", () => {
    it("an agent on the parent vault moves money into an active budget as one ledger transaction, audited, and the books balance", async () => {
      const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
      const res = await fund(parentToken, child.vaultId.toUpperCase(), 2_500n);
      expect(res.replayed).to.equal(false);
      expect([res.vaultId, res.parentVaultId, res.currency, res.amountCents, res.balanceCents]).to.deep.equal([
        child.vaultId,
        owner.vaultId,
        "USD",
        2_500n,
        2_500n,
      ]);
      expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([7_500, 2_500]);
      expect(await legsOf(stack, res.transferId)).to.deep.equal({ kind: "budget.fund", legs: { [owner.vaultId]: -2_500, [child.vaultId]: 2_500 } });
      const audit = await stack.core.db("audit_records").where({ action: "agent.budget.fund", subject: child.vaultId });
      expect(audit.map((a) => [a.actor, a.outcome])).to.deep.equal([[`agent:${owner.agentPrincipalId}`, "success"]]);
      await expectLedgerBalanced(stack);
      // The budget's agent spends it under its policy.
      const paid = await stack.clients.budgets.initiatePayment({ accessToken: await grantFor(stack, child), payment: payment({ amountCents: 1_000n }) });
      expect(paid.payment!.status).to.equal(PaymentStatus.COMPLETED);
      expect(await balanceOf(stack, child.vaultId)).to.equal(1_500);
      await expectLedgerBalanced(stack);
    });

    it("a replay moves nothing and says replayed; the same key with another amount is idempotency_conflict", async () => {
      const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
      const k = key();
      const first = await fund(parentToken, child.vaultId, 3_000n, k);
      // Any grant on the parent vault replays the key: it names the budget's movement, not the caller's.
      const again = await fund(await grantFor(stack, owner), child.vaultId, 3_000n, k);
      expect([again.replayed, again.transferId, again.amountCents, again.balanceCents]).to.deep.equal([true, first.transferId, 3_000n, 3_000n]);
      expect(await balanceOf(stack, owner.vaultId)).to.equal(7_000);
      const conflict = await refusalOf(fund(parentToken, child.vaultId, 3_001n, k));
      expect([conflict.code, conflict.detail?.reason]).to.deep.equal([Code.AlreadyExists, Reason.IDEMPOTENCY_CONFLICT]);
      expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([7_000, 3_000]);
      expect(await stack.core.db("audit_records").where({ action: "agent.budget.fund", subject: child.vaultId, outcome: "success" })).to.have.length(1);
      // The key is the budget's: the same key on another budget is another movement.
      const other = await stack.clients.budgets.createBudget({ accessToken: parentToken, ...budgetParams() });
      expect((await fund(parentToken, other.budget!.vaultId, 1_000n, k)).replayed).to.equal(false);
      await expectLedgerBalanced(stack);
    });

    it("refuses beyond the parent's balance (insufficient_funds, audited) and amounts or keys out of range; nothing moves", async () => {
      const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 1_000n });
      const over = await refusalOf(fund(parentToken, child.vaultId, 1_001n));
      expect([over.code, over.detail?.reason, over.message]).to.deep.equal([
        Code.FailedPrecondition,
        Reason.INSUFFICIENT_FUNDS,
        "the parent vault's balance is below the amount",
      ]);
      const failure = await stack.core.db("audit_records").where({ action: "agent.budget.fund", subject: child.vaultId, outcome: "failure" });
      expect(failure.map((a) => a.reason)).to.deep.equal(["insufficient_funds"]);
      for (const amountCents of [0n, -1n, 9_007_199_254_740_992n]) await expectRefused(fund(parentToken, child.vaultId, amountCents), Reason.INVALID_REQUEST);
      await expectRefused(fund(parentToken, child.vaultId, 10n, "short"), Reason.INVALID_REQUEST);
      await expectRefused(fund(parentToken, child.vaultId, 10n, "k".repeat(129)), Reason.INVALID_REQUEST);
      expect((await fund(parentToken, child.vaultId, 1_000n)).balanceCents).to.equal(1_000n); // exactly the balance is fine
      expect(await balanceOf(stack, owner.vaultId)).to.equal(0);
      await expectLedgerBalanced(stack);
    });

    it("hostile callers: another user's budget, a vault that is no budget, the budget's own grant, a grandchild, a missing scope, a revoked grant", async () => {
      const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
      const stranger = await budgetUnderRoot(stack, { parentCents: 10_000n });
      // Another user's budget looks like no budget at all.
      await expectRefused(fund(stranger.parentToken, child.vaultId, 100n), Reason.NOT_FOUND);
      // Vaults that are no budget: the owner's root vault, an unknown id, not an id.
      for (const vaultId of [owner.vaultId, randomUUID(), "x'; --"]) await expectRefused(fund(parentToken, vaultId, 100n), Reason.NOT_FOUND);
      // The budget's own grant (agent:budget:create on the budget vault) cannot fund its budget from its parent.
      const own = await grantFor(stack, child, { scopes: ALL_AGENT_SCOPES });
      const self = await refusalOf(fund(own, child.vaultId, 100n));
      expect([self.code, self.detail?.reason]).to.deep.equal([Code.PermissionDenied, Reason.GRANT_REQUIRED]);
      // A budget of the child (a grandchild) is funded from the child's vault, never by the root's grant.
      await stack.admin.budgets.fundVault({ vaultId: child.vaultId, amountCents: 500n });
      const grandchild = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, child, { stepUp: true }), ...budgetParams() });
      await expectRefused(fund(parentToken, grandchild.budget!.vaultId, 100n), Reason.GRANT_REQUIRED);
      expect((await fund(own, grandchild.budget!.vaultId, 100n)).parentVaultId).to.equal(child.vaultId);
      // Scope, token and caller shape.
      const noScope = await grantFor(stack, owner, { scopes: ALL_AGENT_SCOPES.filter((s) => s !== "agent:budget:create") });
      await expectRefused(fund(noScope, child.vaultId, 100n), Reason.INSUFFICIENT_SCOPE);
      const revoked = await grantFor(stack, owner);
      await revokeGrant(stack, revoked);
      await expectRefused(fund(revoked, child.vaultId, 100n), Reason.INVALID_TOKEN);
      await expectRefused(fund("", child.vaultId, 100n), Reason.INVALID_TOKEN);
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      await expectRefused(
        stack.clients.budgets.fundBudget({ accessToken: parentToken, sessionToken: session, vaultId: child.vaultId, amountCents: 100n, idempotencyKey: key() }),
        Reason.INVALID_REQUEST,
      );
      // Nothing moved but the grandchild's 100.
      expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId), await balanceOf(stack, stranger.owner.vaultId)]).to.deep.equal([
        10_000, 400, 10_000,
      ]);
      await expectLedgerBalanced(stack);
    });

    it("the owner funds with a stepped-up session, a draft budget too; an agent cannot fund a draft; declining a funded draft sweeps it back", async () => {
      const { owner, parentToken, child, budget } = await budgetUnderRoot(stack, { parentCents: 10_000n, stepUp: false });
      expect(budget.status).to.equal(BudgetStatus.DRAFT);
      const draft = await refusalOf(fund(parentToken, child.vaultId, 100n));
      expect([draft.detail?.reason, draft.message]).to.deep.equal([
        Reason.ACCESS_DENIED,
        "the budget is a draft awaiting its owner's approval: only the owner can fund it",
      ]);
      const plain = await ownerSession(stack, owner.userId);
      const ownerFund = (sessionToken: string, vaultId = child.vaultId, amountCents = 4_000n) =>
        stack.clients.budgets.fundBudget({ sessionToken, vaultId, amountCents, idempotencyKey: key() });
      await expectRefused(ownerFund(plain), Reason.ACCESS_DENIED);
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      expect((await ownerFund(session)).balanceCents).to.equal(4_000n);
      const stranger = await ownerSession(stack, (await createOwner(stack)).userId, { stepUp: true });
      await expectRefused(ownerFund(stranger), Reason.NOT_FOUND);
      expect(await stack.core.db("audit_records").where({ action: "agent.budget.fund", subject: child.vaultId, actor: `user:${owner.userId}` })).to.have.length(
        1,
      );
      await expectLedgerBalanced(stack);
      // The owner declines the draft after all: its money goes back to the parent.
      await stack.clients.budgets.declineBudget({ sessionToken: session, agentPrincipalId: child.agentPrincipalId });
      expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([10_000, 0]);
      const sweep = await stack.core.db("ledger_transactions").where({ kind: "budget.sweep", reference: `budget:${child.vaultId}` });
      expect(sweep).to.have.length(1);
      expect((await legsOf(stack, sweep[0].id)).legs).to.deep.equal({ [child.vaultId]: -4_000, [owner.vaultId]: 4_000 });
      const declined = await refusalOf(ownerFund(session));
      expect([declined.detail?.reason, declined.message]).to.deep.equal([Reason.ACCESS_DENIED, "the vault owner declined this budget"]);
      await expectLedgerBalanced(stack);
    });
  });

  describe("CloseBudget", () => {
    it("an agent closes a budget: grants revoked, pending payment declined, policy frozen, balance swept back; closing again changes nothing", async () => {
      const { owner, parentToken, child, params } = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: 500n } });
      await fund(parentToken, child.vaultId, 6_000n);
      const childToken = await grantFor(stack, child);
      const reissued = (await stack.clients.grants.supersedeGrant({ accessToken: await grantFor(stack, child), scope: "" })).token!.accessToken;
      const spent = await stack.clients.budgets.initiatePayment({ accessToken: childToken, payment: payment({ amountCents: 400n }) });
      expect(spent.payment!.status).to.equal(PaymentStatus.COMPLETED);
      const pendingAsk = payment({ amountCents: 900n });
      const pending = await stack.clients.budgets.initiatePayment({ accessToken: childToken, payment: pendingAsk });
      expect(pending.payment!.status).to.equal(PaymentStatus.PENDING_STEP_UP);
      await expectLedgerBalanced(stack);

      const closed = await stack.clients.budgets.closeBudget({ accessToken: parentToken, vaultId: child.vaultId });
      expect([closed.status, closed.alreadyClosed, closed.sweptCents, closed.currency, closed.parentVaultId]).to.deep.equal([
        BudgetStatus.CLOSED,
        false,
        5_600n,
        "USD",
        owner.vaultId,
      ]);
      // The two agent grants and the superseded one behind the reissue.
      expect(closed.revokedGrants).to.equal(3);
      expect(timestampDate(closed.closedAt!).getTime()).to.equal(stack.clock().getTime());
      expect(await legsOf(stack, closed.transferId)).to.deep.equal({ kind: "budget.sweep", legs: { [child.vaultId]: -5_600, [owner.vaultId]: 5_600 } });
      expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([9_600, 0]);
      expect((await stack.core.db("agent_payments").where({ id: pending.payment!.paymentId }).first()).status).to.equal("declined");
      expect((await stack.core.db("vault_policies").where({ vault_id: child.vaultId }).first()).status).to.equal("closed");
      expect(await stack.core.db("grants").where({ vault_id: child.vaultId }).whereNot({ state: "revoked" })).to.deep.equal([]);
      expect((await stack.core.db("audit_records").where({ action: "agent.budget.close", subject: child.vaultId })).map((a) => a.actor)).to.deep.equal([
        `agent:${owner.agentPrincipalId}`,
      ]);
      await expectLedgerBalanced(stack);

      // Nothing more is paid: the old grants are revoked, no grant is issued on the vault
      // any more, and one that exists anyway (written directly) meets a frozen policy.
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: childToken, payment: payment({ amountCents: 10n }) }), Reason.INVALID_TOKEN);
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: reissued, payment: payment({ amountCents: 10n }) }), Reason.INVALID_TOKEN);
      await expectRefused(
        stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: child.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true }),
        Reason.INVALID_TARGET,
      );
      const later = await grantFor(stack, child, { stepUp: true });
      const frozen = await refusalOf(stack.clients.budgets.initiatePayment({ accessToken: later, payment: payment({ amountCents: 10n }) }));
      expect([frozen.detail?.reason, frozen.detail?.limitName]).to.deep.equal([Reason.POLICY_DENIED, "policy_inactive"]);
      expect((await stack.clients.budgets.simulatePayment({ accessToken: later, payment: payment({ amountCents: 10n }) })).decision).to.equal(Decision.DENY);
      // The pending payment's repeat is declined, even for a new grant.
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: later, payment: pendingAsk }), Reason.ACCESS_DENIED);
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: pending.payment!.paymentId }), Reason.NOT_FOUND);
      // Closed is final: no activation, no funding, no new life for its create key.
      await expectRefused(stack.clients.budgets.activateBudget({ sessionToken: session, agentPrincipalId: child.agentPrincipalId }), Reason.NOT_FOUND);
      const closedFund = await refusalOf(fund(parentToken, child.vaultId, 100n));
      expect([closedFund.detail?.reason, closedFund.message]).to.deep.equal([Reason.ACCESS_DENIED, "the budget is closed"]);
      await expectRefused(stack.clients.budgets.createBudget({ accessToken: parentToken, ...params }), Reason.ACCESS_DENIED);

      const again = await stack.clients.budgets.closeBudget({ accessToken: parentToken, vaultId: child.vaultId });
      expect([again.alreadyClosed, again.sweptCents, again.transferId, again.revokedGrants, again.closedAt]).to.deep.equal([true, 0n, "", 0, closed.closedAt]);
      expect(await stack.core.db("audit_records").where({ action: "agent.budget.close", subject: child.vaultId })).to.have.length(1);
      expect(await balanceOf(stack, owner.vaultId)).to.equal(9_600);
      await expectLedgerBalanced(stack);
    });

    it("the owner closes with keep_funds: the money stays in the closed vault and nothing spends it", async () => {
      const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
      const k = key();
      await fund(parentToken, child.vaultId, 2_000n, k);
      const childToken = await grantFor(stack, child);
      const plain = await ownerSession(stack, owner.userId);
      await expectRefused(stack.clients.budgets.closeBudget({ sessionToken: plain, vaultId: child.vaultId, keepFunds: true }), Reason.ACCESS_DENIED);
      const stranger = await ownerSession(stack, (await createOwner(stack)).userId, { stepUp: true });
      await expectRefused(stack.clients.budgets.closeBudget({ sessionToken: stranger, vaultId: child.vaultId }), Reason.NOT_FOUND);
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      const closed = await stack.clients.budgets.closeBudget({ sessionToken: session, vaultId: child.vaultId, keepFunds: true });
      expect([closed.alreadyClosed, closed.sweptCents, closed.transferId, closed.revokedGrants]).to.deep.equal([false, 0n, "", 1]);
      expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([8_000, 2_000]);
      expect(
        (await stack.core.db("audit_records").where({ action: "agent.budget.close", subject: child.vaultId }).orderBy("seq")).map((a) => [
          a.actor.startsWith("user:"),
          a.outcome,
          a.reason,
        ]),
      ).to.deep.equal([
        [true, "failure", "not_found"], // the stranger
        [true, "success", ""],
      ]);
      expect((await stack.core.db("audit_records").where({ action: "agent.budget.close", subject: child.vaultId, outcome: "success" }).first()).actor).to.equal(
        `user:${owner.userId}`,
      );
      await expectLedgerBalanced(stack);
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: childToken, payment: payment({ amountCents: 10n }) }), Reason.INVALID_TOKEN);
      const later = await grantFor(stack, child);
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: later, payment: payment({ amountCents: 10n }) }), Reason.POLICY_DENIED);
      // A replay of the funding key still answers what it did.
      expect((await fund(parentToken, child.vaultId, 2_000n, k)).replayed).to.equal(true);
      // Closing again (even without keep_funds) changes nothing.
      const again = await stack.clients.budgets.closeBudget({ sessionToken: session, vaultId: child.vaultId });
      expect([again.alreadyClosed, again.sweptCents]).to.deep.equal([true, 0n]);
      expect(await balanceOf(stack, child.vaultId)).to.equal(2_000);
      await expectLedgerBalanced(stack);
    });

    it("closing a budget closes the budgets its agent made, all levels down; their money comes up; nothing new is made under it", async () => {
      // root A -> B -> C -> D, each funded from its parent; C's agent has spent 500.
      const { owner, parentToken, child: b } = await budgetUnderRoot(stack, { parentCents: 10_000n });
      await fund(parentToken, b.vaultId, 5_000n);
      const tokenB = await grantFor(stack, b, { stepUp: true });
      const c = (await stack.clients.budgets.createBudget({ accessToken: tokenB, ...budgetParams({ stepUpAmountCents: undefined }) })).budget!;
      await fund(tokenB, c.vaultId, 2_000n);
      const cAgent = { userId: owner.userId, vaultId: c.vaultId, agentPrincipalId: c.agentPrincipalId };
      const tokenC = await grantFor(stack, cAgent, { stepUp: true });
      expect((await stack.clients.budgets.initiatePayment({ accessToken: tokenC, payment: payment({ amountCents: 500n }) })).payment!.status).to.equal(
        PaymentStatus.COMPLETED,
      );
      const d = (await stack.clients.budgets.createBudget({ accessToken: tokenC, ...budgetParams() })).budget!;
      await fund(tokenC, d.vaultId, 300n);
      const dToken = await grantFor(stack, { userId: owner.userId, vaultId: d.vaultId, agentPrincipalId: d.agentPrincipalId });
      // A sibling under A stays as it is.
      const sibling = (await stack.clients.budgets.createBudget({ accessToken: parentToken, ...budgetParams() })).budget!;
      await fund(parentToken, sibling.vaultId, 100n);
      await expectLedgerBalanced(stack);

      const closed = await stack.clients.budgets.closeBudget({ accessToken: parentToken, vaultId: b.vaultId });
      // D's 300 went to C, C's 1,200 + 300 to B, B's 3,000 + 1,500 to A.
      expect([closed.sweptCents, closed.revokedGrants]).to.deep.equal([4_500n, 3]); // one grant on each of B, C and D
      const balances = await Promise.all([owner.vaultId, b.vaultId, c.vaultId, d.vaultId, sibling.vaultId].map((v) => balanceOf(stack, v)));
      expect(balances).to.deep.equal([9_400, 0, 0, 0, 100]);
      const statuses = await Promise.all(
        [b.vaultId, c.vaultId, d.vaultId, sibling.vaultId].map(async (v) => (await stack.core.db("budgets").where({ vault_id: v }).first()).status),
      );
      expect(statuses).to.deep.equal(["closed", "closed", "closed", "active"]);
      const sweeps = await stack.core
        .db("ledger_transactions")
        .where({ kind: "budget.sweep" })
        .whereIn(
          "reference",
          [b, c, d].map((x) => `budget:${x.vaultId}`),
        );
      expect(sweeps).to.have.length(3);
      await expectLedgerBalanced(stack);
      for (const t of [tokenB, tokenC, dToken])
        await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: t, payment: payment({ amountCents: 1n }) }), Reason.INVALID_TOKEN);
      // A grant issued later on a closed budget's vault neither pays nor makes budgets there.
      const later = await grantFor(stack, cAgent, { stepUp: true });
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: later, payment: payment({ amountCents: 1n }) }), Reason.POLICY_DENIED);
      const made = await refusalOf(stack.clients.budgets.createBudget({ accessToken: later, ...budgetParams() }));
      expect([made.detail?.reason, made.message]).to.deep.equal([Reason.ACCESS_DENIED, "the grant's vault belongs to a closed budget"]);
      expect(await stack.core.db("budgets").where({ parent_vault_id: c.vaultId })).to.have.length(1);
      // D alone was closed with its parents: closing it again changes nothing.
      expect((await stack.clients.budgets.closeBudget({ accessToken: later, vaultId: d.vaultId })).alreadyClosed).to.equal(true);
    });

    it("hostile callers: another user's budget, the budget's own grant, a vault that is no budget; an approved payment never completes after close", async () => {
      const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: 500n } });
      await fund(parentToken, child.vaultId, 5_000n);
      const stranger = await budgetUnderRoot(stack);
      await expectRefused(stack.clients.budgets.closeBudget({ accessToken: stranger.parentToken, vaultId: child.vaultId }), Reason.NOT_FOUND);
      const own = await grantFor(stack, child);
      await expectRefused(stack.clients.budgets.closeBudget({ accessToken: own, vaultId: child.vaultId }), Reason.GRANT_REQUIRED);
      await expectRefused(stack.clients.budgets.closeBudget({ accessToken: parentToken, vaultId: owner.vaultId }), Reason.NOT_FOUND);
      await expectRefused(stack.clients.budgets.closeBudget({ accessToken: "", vaultId: child.vaultId }), Reason.INVALID_TOKEN);
      expect((await stack.core.db("budgets").where({ vault_id: child.vaultId }).first()).status).to.equal("active");
      expect(await stack.core.db("audit_records").where({ action: "agent.budget.close", subject: child.vaultId, outcome: "failure" })).to.have.length(2);

      const ask = payment({ amountCents: 900n });
      const pending = await stack.clients.budgets.initiatePayment({ accessToken: own, payment: ask });
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      await stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: pending.payment!.paymentId });
      await stack.clients.budgets.closeBudget({ sessionToken: session, vaultId: child.vaultId });
      expect((await stack.core.db("agent_payments").where({ id: pending.payment!.paymentId }).first()).status).to.equal("declined");
      const repeat = await refusalOf(stack.clients.budgets.initiatePayment({ accessToken: await grantFor(stack, child), payment: ask }));
      expect([repeat.detail?.reason, repeat.message]).to.deep.equal([Reason.ACCESS_DENIED, "the vault owner declined this payment"]);
      expect(await balanceOf(stack, child.vaultId)).to.equal(0);
      expect(await balanceOf(stack, owner.vaultId)).to.equal(10_000);
      await expectLedgerBalanced(stack);
    });
  });
});
