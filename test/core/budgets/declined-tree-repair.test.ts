import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { markUnfinished } from "../../../core/db/migrations/0045-budget-endings.js";
import { vaultsStore } from "../../../core/budgets/stores/vaults.js";
import { derivedUuid } from "../../../lib/crypto.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession, payment } from "../../support/budgets.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import { balanceOf, draftWithTree, expectLedgerBalanced } from "../../support/budget-life.js";

/** A draft declined by a release that left its tree open is ended on upgrade: what is below closes, its money comes back. */
describe("Budgets below a draft an older release declined", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ provisioningLimitPerMinute: 1000 });
  });
  after(() => stack.close());

  const key = () => `k-${randomUUID()}`;
  const statusOf = async (vaultId: string) => (await stack.core.db("budgets").where({ vault_id: vaultId }).first("status")).status as string;

  /**
   * A funded draft D whose agent made an active, funded sub-budget S (with S2 below), then declined as
   * older releases did: only D's own money swept back (the decline's movement), D marked declined.
   */
  async function oldDecline() {
    const { owner, session, d, s, sToken, s2, s2Token } = await draftWithTree(stack);
    await stack.core.db.transaction(async (trx) => {
      const v = await vaultsStore.lockVaults(trx, [owner.vaultId, d.vaultId]);
      const at = stack.clock();
      const movement = { id: derivedUuid("budget.sweep", d.vaultId, "decline"), kind: "budget.sweep" as const, reference: `budget:${d.vaultId}`, at };
      await vaultsStore.moveBetweenVaults(trx, v.get(d.vaultId)!, v.get(owner.vaultId)!, v.get(d.vaultId)!.balanceCents, movement);
      await trx("budgets").where({ vault_id: d.vaultId }).update({ status: "declined", updated_at: at });
    });
    return { owner, session, d, s, sToken, s2, s2Token };
  }

  it("the upgrade marks it and the reaper closes everything below, revokes its grants and brings all money back; ledger verify is clean", async () => {
    const t = await oldDecline();
    // The old state: S still pays; 25,000 sit below a declined draft.
    await stack.clients.budgets.initiatePayment({ accessToken: t.s2Token, payment: payment({ amountCents: 1_000n }) });
    expect(await balanceOf(stack, t.owner.vaultId)).to.equal(80_000);
    // A draft declined by this release, and an active budget, are left as they are.
    const fine = await createOwner(stack);
    const active = (await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, fine, { stepUp: true }), ...budgetParams() })).budget!;
    const declined = (await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, fine), ...budgetParams() })).budget!;
    await stack.clients.budgets.declineBudget({ sessionToken: await ownerSession(stack, fine.userId), agentPrincipalId: declined.agentPrincipalId });
    await markUnfinished(stack.core.db);
    const marked = await stack.core.db("budget_endings").join("budgets", "budgets.id", "budget_endings.budget_id").pluck("budgets.vault_id");
    expect(marked).to.include(t.d.vaultId);
    expect(marked).to.not.include.members([active.vaultId, declined.vaultId]);
    await stack.admin.budgets.reapProvisioning({});
    expect([await statusOf(t.d.vaultId), await statusOf(t.s.vaultId), await statusOf(t.s2.vaultId)]).to.deep.equal(["declined", "closed", "closed"]);
    expect(await Promise.all([t.owner, t.d, t.s, t.s2].map((x) => balanceOf(stack, x.vaultId)))).to.deep.equal([99_000, 0, 0, 0]);
    await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: t.sToken, payment: payment() }), Reason.INVALID_TOKEN);
    const closes = await stack.core.db("audit_records").where({ action: "agent.budget.close", actor: "reaper", reason: "parent_declined" });
    expect(closes.map((a) => a.subject)).to.include.members([t.s.vaultId, t.s2.vaultId]);
    expect(
      await stack.core.db("budget_endings").where({ budget_id: (await stack.core.db("budgets").where({ vault_id: t.d.vaultId }).first("id")).id }),
    ).to.deep.equal([]);
    // Idempotent: marking again finds nothing left to end.
    await markUnfinished(stack.core.db);
    expect(
      await stack.core.db("budget_endings").join("budgets", "budgets.id", "budget_endings.budget_id").where({ "budgets.user_id": t.owner.userId }),
    ).to.deep.equal([]);
    await expectLedgerBalanced(stack);
  });
  it("reaper passes racing the old tree's agents paying and funding and its owner closing: nothing open is left below, the books balance (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    this.timeout(180_000);
    const trees = await Promise.all(Array.from({ length: 4 }, () => oldDecline()));
    await markUnfinished(stack.core.db);
    const outcomes: (Reason | "ok" | undefined)[] = [];
    const calls: Promise<unknown>[] = trees.flatMap((t) => [
      stack.clients.budgets.closeBudget({ sessionToken: t.session, vaultId: t.s2.vaultId }),
      ...Array.from({ length: 3 }, () => stack.clients.budgets.initiatePayment({ accessToken: t.s2Token, payment: payment({ amountCents: 100n }) })),
      ...Array.from({ length: 3 }, () =>
        stack.clients.budgets.fundBudget({ accessToken: t.sToken, vaultId: t.s2.vaultId, amountCents: 100n, idempotencyKey: key() }),
      ),
    ]);
    calls.splice(5, 0, ...Array.from({ length: 3 }, () => stack.admin.budgets.reapProvisioning({})));
    for (const r of await Promise.allSettled(calls)) outcomes.push(r.status === "fulfilled" ? "ok" : reasonOf(r.reason));
    await stack.admin.budgets.reapProvisioning({});
    expect(outcomes, "no internal error").to.not.include(undefined);
    for (const t of trees) {
      expect([await statusOf(t.s.vaultId), await statusOf(t.s2.vaultId)]).to.deep.equal(["closed", "closed"]);
      const paid = await stack.core.db("agent_payments").where({ user_id: t.owner.userId, status: "completed" }).sum({ n: "amount_cents" });
      expect(await Promise.all([t.d, t.s, t.s2].map((x) => balanceOf(stack, x.vaultId)))).to.deep.equal([0, 0, 0]);
      expect(await balanceOf(stack, t.owner.vaultId)).to.equal(100_000 - Number(paid[0].n ?? 0));
    }
    await expectLedgerBalanced(stack);
  });
});
