import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession } from "../../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../../support/budget-life.js";
import { requirePostgres } from "../../support/db.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";
import type { StepName } from "../../../core/budgets/records.js";

/** The operator's FundVault puts no money where nothing can spend it or a cleanup would remove it. */
describe("FundVault and budgets that are over", () => {
  let stack: TestStack;
  /** Saga steps that fail, each as "name:phase". */
  let failing: string[] = [];
  before(async () => {
    stack = await startStack({
      scrypt: { N: 1024, r: 8, p: 1 },
      budgetFaults: { step: (name: StepName, phase) => (failing.includes(`${name}:${phase}`) ? new Error(`injected ${phase} fault in ${name}`) : undefined) },
    });
  });
  after(() => stack.close());

  it("refuses a closed and a declined budget's vault with access_denied, moving nothing; open budgets and root vaults still take money", async () => {
    const closed = await budgetUnderRoot(stack);
    await stack.clients.budgets.closeBudget({ accessToken: closed.parentToken, vaultId: closed.child.vaultId });
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    await stack.clients.budgets.declineBudget({ sessionToken: await ownerSession(stack, owner.userId), agentPrincipalId: budget!.agentPrincipalId });
    for (const [vaultId, status] of [
      [closed.child.vaultId, "closed"],
      [budget!.vaultId.toUpperCase(), "declined"],
    ] as const) {
      const refused = await expectRefused(stack.admin.budgets.fundVault({ vaultId, amountCents: 500n }), Reason.ACCESS_DENIED);
      expect(refused.message).to.equal(`the vault belongs to a ${status} budget, where nothing can spend; fund its parent vault`);
      expect(await balanceOf(stack, vaultId.toLowerCase())).to.equal(0);
    }
    const open = await budgetUnderRoot(stack);
    expect((await stack.admin.budgets.fundVault({ vaultId: open.child.vaultId, amountCents: 500n })).balanceCents).to.equal(500n);
    expect(Number((await stack.admin.budgets.fundVault({ vaultId: closed.owner.vaultId, amountCents: 500n })).balanceCents)).to.be.greaterThan(0);
    await expectLedgerBalanced(stack);
  });

  it("refuses the vault of a budget whose creation did not complete: the reaper that removes it would take the money with it", async () => {
    const owner = await createOwner(stack);
    failing = ["policy:run", "vault:compensate"];
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() }), Reason.PROVISIONING_FAILED);
    failing = [];
    const left = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId }).first("status", "vault_id");
    expect(left.status).to.equal("cleanup_pending");
    const refused = await expectRefused(stack.admin.budgets.fundVault({ vaultId: left.vault_id, amountCents: 500n }), Reason.ACCESS_DENIED);
    expect(refused.message).to.equal("the vault belongs to a budget whose creation did not complete; fund it once the budget exists");
    stack.clock.advance(10 * 60_000);
    expect((await stack.admin.budgets.reapProvisioning({})).cleaned).to.be.at.least(1);
    expect(await stack.core.db("vaults").where({ id: left.vault_id })).to.deep.equal([]);
    await expectLedgerBalanced(stack);
  });

  it("a close racing many FundVault calls on the budget's vault leaves the closed vault empty: each fund came before and was swept, or was refused (PostgreSQL)", async function () {
    requirePostgres(this, "the race needs the close and the funds on separate connections");
    for (let round = 0; round < 3; round++) {
      const life = await budgetUnderRoot(stack, { parentCents: 1_000n });
      const funds = Array.from({ length: 16 }, () => stack.admin.budgets.fundVault({ vaultId: life.child.vaultId, amountCents: 100n }));
      const close = stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId });
      const outcomes = await Promise.allSettled(funds);
      await close;
      const refused = outcomes.filter((o) => o.status === "rejected").map((o) => reasonOf((o as PromiseRejectedResult).reason));
      expect(
        refused.every((r) => r === Reason.ACCESS_DENIED),
        JSON.stringify(refused),
      ).to.equal(true);
      const funded = outcomes.length - refused.length;
      expect(await balanceOf(stack, life.child.vaultId), "the closed vault holds nothing").to.equal(0);
      expect(await balanceOf(stack, life.owner.vaultId), "whatever was funded came up to the parent").to.equal(1_000 + 100 * funded);
    }
    await expectLedgerBalanced(stack);
  });
});
