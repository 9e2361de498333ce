import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession } from "../../support/budgets.js";
import { reasonOf } from "../../support/refusals.js";
import { balanceOf, expectLedgerBalanced } from "../../support/budget-life.js";
import { requirePostgres } from "../../support/db.js";

/** The kill switch racing draft creation, activation and funding leaves no draft of a revoked agent waiting. */
describe("Kill switch racing drafts (Postgres)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "racing transactions need several connections");
    stack = await startStack({ provisioningLimitPerMinute: 1000 });
  });
  after(() => stack?.close());

  it("hostile agents asking for drafts and an owner activating and funding them while the kill switch is pulled: no draft is left, the books balance", async function () {
    this.timeout(180_000);
    const outcomes: (Reason | "ok" | undefined)[] = [];
    await Promise.all(
      Array.from({ length: 6 }, async (_, round) => {
        const o = await createOwner(stack);
        await stack.admin.budgets.fundVault({ vaultId: o.vaultId, amountCents: 100_000n });
        const session = await ownerSession(stack, o.userId, { stepUp: true });
        const agents = await Promise.all(Array.from({ length: 3 }, () => grantFor(stack, o)));
        const drafts = [];
        for (const accessToken of agents) drafts.push((await stack.clients.budgets.createBudget({ accessToken, ...budgetParams() })).budget!);
        const fund = (vaultId: string) =>
          stack.clients.budgets.fundBudget({ sessionToken: session, vaultId, amountCents: 1_000n, idempotencyKey: `f-${randomUUID()}` });
        await fund(drafts[0]!.vaultId);
        const calls: Promise<unknown>[] = [
          ...drafts.map((d) => stack.clients.budgets.activateBudget({ sessionToken: session, agentPrincipalId: d.agentPrincipalId })),
          ...drafts.flatMap((d) => [fund(d.vaultId), fund(d.vaultId)]),
          ...agents.flatMap((accessToken) => Array.from({ length: 3 }, () => stack.clients.budgets.createBudget({ accessToken, ...budgetParams() }))),
        ];
        const kill =
          round % 2 === 0
            ? stack.clients.grants.killSwitch({ sessionToken: session })
            : stack.clients.grants.revokeAllGrants({ accessToken: agents[0]!, reason: "" });
        calls.splice(round * 3, 0, kill);
        const settled = await Promise.allSettled(calls);
        for (const r of settled) outcomes.push(r.status === "fulfilled" ? "ok" : reasonOf(r.reason));
        const k = settled[round * 3]!;
        expect(k.status, `the kill switch: ${k.status === "rejected" ? String(k.reason) : ""}`).to.equal("fulfilled");
        const budgets = await stack.core.db("budgets").where({ user_id: o.userId });
        expect(budgets.filter((b) => !["declined", "active", "failed"].includes(b.status)).map((b) => b.status)).to.deep.equal([]);
        expect(
          await stack.core.db("budget_endings").whereIn(
            "budget_id",
            budgets.map((b) => b.id),
          ),
        ).to.deep.equal([]);
        // What was not activated before the switch came back; what was stays in its budget.
        const held = await Promise.all(budgets.filter((b) => b.status !== "failed").map((b) => balanceOf(stack, b.vault_id)));
        const declined = await Promise.all(budgets.filter((b) => b.status === "declined").map((b) => balanceOf(stack, b.vault_id)));
        expect(declined.every((c) => c === 0)).to.equal(true);
        expect((await balanceOf(stack, o.vaultId)) + held.reduce((a, c) => a + c, 0)).to.equal(100_000);
      }),
    );
    expect(outcomes, "no internal error").to.not.include(undefined);
    const refusals = new Set(outcomes.filter((x) => x !== "ok"));
    for (const r of refusals) expect([Reason.INVALID_TOKEN, Reason.NOT_FOUND, Reason.ACCESS_DENIED, Reason.VAULT_CONTENTION]).to.include(r);
    await expectLedgerBalanced(stack);
  });
});
