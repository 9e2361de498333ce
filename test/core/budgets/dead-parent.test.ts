import { expect } from "chai";
import { Code } from "@connectrpc/connect";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession, type TestOwner } from "../../support/budgets.js";
import { expectRefused, reasonOf, refusalOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";

/** A declined (or closed) budget's vault makes no budgets of its own. */
describe("BudgetsService.CreateBudget under a declined budget", () => {
  let stack: TestStack;
  /** Set by a test to hold the next saga before its policy step. */
  let hold: { reached: () => void; release: Promise<void> } | undefined;
  before(async () => {
    stack = await startStack({
      provisioningLimitPerMinute: 1000,
      budgetFaults: {
        beforeStep: async (name) => {
          const h = hold;
          if (name !== "policy" || !h) return;
          hold = undefined;
          h.reached();
          await h.release;
        },
      },
    });
  });
  after(() => stack.close());

  /** A draft budget (made without step-up) and its owner's session. */
  async function draftBudget() {
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    expect(budget!.status).to.equal(BudgetStatus.DRAFT);
    const child: TestOwner = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    const sessionToken = await ownerSession(stack, owner.userId);
    return { owner, child, sessionToken };
  }

  it("an agent on a declined draft's vault is refused access_denied, audited; nothing is provisioned", async () => {
    const { child, sessionToken } = await draftBudget();
    const before = await grantFor(stack, child, { stepUp: true });
    await stack.clients.budgets.declineBudget({ sessionToken, agentPrincipalId: child.agentPrincipalId });
    // The decline revoked the grant; one written on the vault afterwards still makes nothing.
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: before, ...budgetParams() }), Reason.INVALID_TOKEN);
    const token = await grantFor(stack, child, { stepUp: true });
    const refused = await refusalOf(stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams() }));
    expect([refused.code, refused.detail?.reason, refused.message]).to.deep.equal([
      Code.PermissionDenied,
      Reason.ACCESS_DENIED,
      "the grant's vault belongs to a budget its owner declined",
    ]);
    expect(await stack.core.db("budgets").where({ parent_vault_id: child.vaultId })).to.deep.equal([]);
    expect(await stack.core.db("vaults").where({ parent_vault_id: child.vaultId })).to.deep.equal([]);
    const audit = await stack.core.db("audit_records").where({ action: "agent.budget.create", actor: `agent:${child.agentPrincipalId}` });
    expect(audit.map((a) => [a.outcome, a.reason])).to.deep.equal([["failure", "access_denied"]]);
  });

  it("a saga that started under a draft and finishes after its decline is unwound and refused", async () => {
    const { child, sessionToken } = await draftBudget();
    // Hold the sub-budget's saga before its policy step; decline the parent meanwhile.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const reached = new Promise<void>((resolve) => (hold = { reached: resolve, release: released }));
    const create = refusalOf(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, child, { stepUp: true }), ...budgetParams() }));
    await reached;
    await stack.clients.budgets.declineBudget({ sessionToken, agentPrincipalId: child.agentPrincipalId });
    release();
    const refused = await create;
    expect([refused.detail?.reason, refused.message]).to.deep.equal([
      Reason.ACCESS_DENIED,
      "the grant's vault belongs to a budget its owner declined; nothing was kept",
    ]);
    const rows = await stack.core.db("budgets").where({ parent_vault_id: child.vaultId });
    expect(rows.map((r) => r.status)).to.deep.equal(["failed"]);
    expect(await stack.core.db("vaults").where({ parent_vault_id: child.vaultId })).to.deep.equal([]);
    expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: child.vaultId })).to.deep.equal([]);
  });

  it("an active budget's agent still makes budgets; a closed one's is refused as before", async () => {
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...budgetParams() });
    const child: TestOwner = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    const made = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, child, { stepUp: true }), ...budgetParams() });
    expect(made.budget!.status).to.equal(BudgetStatus.ACTIVE);
    await stack.clients.budgets.closeBudget({ accessToken: await grantFor(stack, owner), vaultId: child.vaultId });
    const refused = await refusalOf(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, child, { stepUp: true }), ...budgetParams() }));
    expect([refused.detail?.reason, refused.message]).to.deep.equal([Reason.ACCESS_DENIED, "the grant's vault belongs to a closed budget"]);
  });

  describe("racing a decline (Postgres)", () => {
    before(function () {
      requirePostgres(this, "racing transactions need several connections");
    });

    it("concurrent declines and sub-budget creates: a sub-budget finished before its parent's decline is closed by it", async () => {
      const rounds = 12;
      let refusedCount = 0;
      await Promise.all(
        Array.from({ length: rounds }, async () => {
          const { child, sessionToken } = await draftBudget();
          const token = await grantFor(stack, child, { stepUp: true });
          const [created] = await Promise.allSettled([
            stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams() }),
            stack.clients.budgets.declineBudget({ sessionToken, agentPrincipalId: child.agentPrincipalId }),
          ]);
          const declined = await stack.core.db("audit_records").where({ action: "agent.budget.decline", subject: child.agentPrincipalId }).first("seq");
          const made = await stack.core.db("budgets").where({ parent_vault_id: child.vaultId }).whereIn("status", ["draft", "active", "closed"]);
          expect(
            made.filter((b) => b.status !== "closed"),
            "no live budget under a declined one",
          ).to.deep.equal([]);
          if (created.status === "rejected") {
            refusedCount++;
            // Refused by the declined parent, or by the grant the decline revoked.
            expect([Reason.ACCESS_DENIED, Reason.INVALID_TOKEN]).to.include(reasonOf(created.reason));
            expect(made).to.deep.equal([]);
            expect(await stack.core.db("vaults").where({ parent_vault_id: child.vaultId })).to.deep.equal([]);
            return;
          }
          expect(made).to.have.length(1);
          const finished = await stack.core
            .db("audit_records")
            .where({ action: "agent.budget.create", outcome: "success", subject: made[0].agent_principal_id })
            .first("seq");
          expect(Number(finished.seq), "the sub-budget committed before the decline").to.be.lessThan(Number(declined.seq));
          expect(await stack.core.db("grants").where({ vault_id: made[0].vault_id, state: "active" })).to.deep.equal([]);
        }),
      );
      expect(refusedCount, "some creates met the decline").to.be.greaterThan(0);
    });
  });
});
