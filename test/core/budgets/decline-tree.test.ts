import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, grantFor, payment } from "../../support/budgets.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";
import { balanceOf, draftWithTree, expectLedgerBalanced } from "../../support/budget-life.js";
import { requirePostgres } from "../../support/db.js";

/** Declining a draft ends what its agent built below it: sub-budgets close, grants are revoked, money comes back. */
describe("BudgetsService.DeclineBudget reaches the budgets below the draft", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ provisioningLimitPerMinute: 1000 });
  });
  after(() => stack.close());

  const key = () => `k-${randomUUID()}`;

  it("sub-budgets close, every grant below is revoked, open payments are declined and all money returns to the root", async () => {
    const t = await draftWithTree(stack);
    const pending = await stack.clients.budgets.initiatePayment({ accessToken: t.sToken, payment: payment({ amountCents: 7_000n }) });
    expect(pending.payment!.status).to.equal(PaymentStatus.PENDING_STEP_UP);
    await stack.clients.budgets.initiatePayment({ accessToken: t.s2Token, payment: payment({ amountCents: 1_000n }) });
    const declined = await stack.clients.budgets.declineBudget({ sessionToken: t.session, agentPrincipalId: t.d.agentPrincipalId });
    expect(declined.budget!.status).to.equal(BudgetStatus.DECLINED);
    // By vault, not by created_at: the test clock can stamp all three at one instant.
    const rows = await stack.core.db("budgets").whereIn("vault_id", [t.d.vaultId, t.s.vaultId, t.s2.vaultId]);
    const status = new Map(rows.map((r) => [r.vault_id as string, r.status as string]));
    expect([t.d, t.s, t.s2].map((x) => status.get(x.vaultId))).to.deep.equal(["declined", "closed", "closed"]);
    // Everything but the 1,000 paid is back in the root vault.
    expect(await Promise.all([t.owner, t.d, t.s, t.s2].map((x) => balanceOf(stack, x.vaultId)))).to.deep.equal([99_000, 0, 0, 0]);
    for (const token of [t.dToken, t.sToken, t.s2Token]) {
      await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment() }), Reason.INVALID_TOKEN);
    }
    const open = await stack.core.db("agent_payments").whereIn("vault_id", [t.s.vaultId, t.s2.vaultId]).whereIn("status", ["pending_step_up", "approved"]);
    expect(open).to.deep.equal([]);
    await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: t.session, paymentId: pending.payment!.paymentId }), Reason.NOT_FOUND);
    await expectRefused(stack.clients.budgets.activateBudget({ sessionToken: t.session, agentPrincipalId: t.s.agentPrincipalId }), Reason.NOT_FOUND);
    const closes = await stack.core.db("audit_records").where({ action: "agent.budget.close", actor: `user:${t.owner.userId}` });
    expect(closes.map((a) => [a.subject, a.reason])).to.have.deep.members([
      [t.s.vaultId, "parent_declined"],
      [t.s2.vaultId, "parent_declined"],
    ]);
    await expectLedgerBalanced(stack);
  });

  it("the declined draft's own tokens stop at once: no balance read, no kill switch, no funding, no new grant", async () => {
    const t = await draftWithTree(stack);
    await stack.clients.budgets.declineBudget({ sessionToken: t.session, agentPrincipalId: t.d.agentPrincipalId });
    const accessToken = t.dToken;
    await expectRefused(stack.clients.budgets.getBalance({ accessToken }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.budgets.listGrantAudit({ accessToken }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.grants.revokeAllGrants({ accessToken, reason: "hostile" }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.grants.supersedeGrant({ accessToken }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.budgets.fundBudget({ accessToken, vaultId: t.s.vaultId, amountCents: 1n, idempotencyKey: key() }), Reason.INVALID_TOKEN);
    // The owner's other agents were not touched by the declined agent's kill switch attempt.
    const rootToken = await grantFor(stack, t.owner);
    expect((await stack.clients.budgets.getBalance({ accessToken: rootToken })).balanceCents).to.equal(100_000n);
    const grants = await stack.core.db("grants").whereIn("vault_id", [t.d.vaultId, t.s.vaultId, t.s2.vaultId]).whereNot({ state: "revoked" });
    expect(grants).to.deep.equal([]);
  });

  describe("racing a decline (Postgres)", () => {
    before(function () {
      requirePostgres(this, "racing transactions need several connections");
    });

    it("declines racing sub-budget activation, funding and payments: no live budget is left below, the books balance", async function () {
      this.timeout(120_000);
      const outcomes: (Reason | "ok" | undefined)[] = [];
      const lateOutcomes: (Reason | undefined)[] = [];
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          const t = await draftWithTree(stack);
          // A draft below S for the owner to activate while declining D.
          const sDraft = (await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, t.s), ...budgetParams() })).budget!;
          const calls = [
            stack.clients.budgets.declineBudget({ sessionToken: t.session, agentPrincipalId: t.d.agentPrincipalId }),
            stack.clients.budgets.activateBudget({ sessionToken: t.session, agentPrincipalId: sDraft.agentPrincipalId }),
            ...Array.from({ length: 4 }, () =>
              stack.clients.budgets.fundBudget({ accessToken: t.dToken, vaultId: t.s.vaultId, amountCents: 500n, idempotencyKey: key() }),
            ),
            ...Array.from({ length: 4 }, () =>
              stack.clients.budgets.fundBudget({ accessToken: t.sToken, vaultId: t.s2.vaultId, amountCents: 500n, idempotencyKey: key() }),
            ),
            ...Array.from({ length: 4 }, () => stack.clients.budgets.initiatePayment({ accessToken: t.s2Token, payment: payment({ amountCents: 100n }) })),
            ...Array.from({ length: 4 }, () => stack.clients.budgets.initiatePayment({ accessToken: t.sToken, payment: payment({ amountCents: 100n }) })),
          ];
          const results = await Promise.allSettled(calls);
          expect(results[0]!.status, "the decline").to.equal("fulfilled");
          for (const r of results) outcomes.push(r.status === "fulfilled" ? "ok" : reasonOf(r.reason));
          // The race may settle before the decline commits; these come after it, so they must be refused.
          const late = await Promise.allSettled([
            stack.clients.budgets.fundBudget({ accessToken: t.dToken, vaultId: t.s.vaultId, amountCents: 500n, idempotencyKey: key() }),
            stack.clients.budgets.initiatePayment({ accessToken: t.s2Token, payment: payment({ amountCents: 100n }) }),
            stack.clients.budgets.initiatePayment({ accessToken: t.sToken, payment: payment({ amountCents: 100n }) }),
          ]);
          for (const r of late) {
            expect(r.status, "a call after the decline").to.equal("rejected");
            lateOutcomes.push(reasonOf((r as PromiseRejectedResult).reason));
          }
          const below = await stack.core.db("budgets").whereIn("parent_vault_id", [t.d.vaultId, t.s.vaultId, t.s2.vaultId]);
          expect(below.filter((b) => b.status !== "closed").map((b) => b.status)).to.deep.equal([]);
          expect(
            await stack.core
              .db("grants")
              .whereIn("vault_id", [t.d.vaultId, ...below.map((b) => b.vault_id)])
              .where({ state: "active" }),
          ).to.deep.equal([]);
          const paid = await stack.core.db("agent_payments").where({ user_id: t.owner.userId, status: "completed" }).sum({ n: "amount_cents" });
          const held = await Promise.all([t.d.vaultId, ...below.map((b) => b.vault_id)].map((v) => balanceOf(stack, v)));
          expect(held.every((c) => c === 0)).to.equal(true);
          expect(await balanceOf(stack, t.owner.vaultId)).to.equal(100_000 - Number(paid[0].n ?? 0));
        }),
      );
      expect([...outcomes, ...lateOutcomes], "no internal error").to.not.include(undefined);
      await expectLedgerBalanced(stack);
    });
  });
});
