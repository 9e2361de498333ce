import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession, type TestOwner } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";
import { balanceOf, expectLedgerBalanced } from "../../support/budget-life.js";

const jtiOf = (token: string) => (JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8")) as { jti: string }).jti;

/** A draft asked for by a revoked agent ends with it, as its open payments do (docs/reference/agent-tools.md). */
describe("Revoking grants declines the draft budgets they asked for", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ provisioningLimitPerMinute: 1000 });
  });
  after(() => stack.close());

  /** An owner whose root vault holds 100,000, and their stepped-up session. */
  async function owner() {
    const o = await createOwner(stack);
    await stack.admin.budgets.fundVault({ vaultId: o.vaultId, amountCents: 100_000n });
    return { o, session: await ownerSession(stack, o.userId, { stepUp: true }) };
  }
  const draft = async (accessToken: string) => {
    const { budget } = await stack.clients.budgets.createBudget({ accessToken, ...budgetParams() });
    expect(budget!.status).to.equal(BudgetStatus.DRAFT);
    return budget!;
  };
  const statusOf = async (vaultId: string) => (await stack.core.db("budgets").where({ vault_id: vaultId }).first("status")).status as string;

  it("an agent's killSwitch.all declines every draft the user's agents asked for: funded money returns, activation is refused, the bound is free", async () => {
    const { o, session } = await owner();
    const agent = await grantFor(stack, o);
    const drafts = [];
    for (let i = 0; i < 50; i++) drafts.push(await draft(agent));
    await stack.clients.budgets.fundBudget({ sessionToken: session, vaultId: drafts[0]!.vaultId, amountCents: 30_000n, idempotencyKey: `f-${randomUUID()}` });
    const other = await grantFor(stack, o);
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: other, ...budgetParams() }), Reason.POLICY_DENIED);
    await stack.clients.grants.revokeAllGrants({ accessToken: other, reason: "stop" });
    expect(new Set(await Promise.all(drafts.map((d) => statusOf(d.vaultId))))).to.deep.equal(new Set(["declined"]));
    expect(await balanceOf(stack, o.vaultId)).to.equal(100_000);
    expect(await balanceOf(stack, drafts[0]!.vaultId)).to.equal(0);
    const refused = await expectRefused(
      stack.clients.budgets.activateBudget({ sessionToken: session, agentPrincipalId: drafts[1]!.agentPrincipalId }),
      Reason.NOT_FOUND,
    );
    expect(refused.message).to.equal("the budget was declined");
    expect((await stack.clients.budgets.listPendingApprovals({ sessionToken: session })).draftBudgets).to.deep.equal([]);
    const audits = await stack.core
      .db("audit_records")
      .where({ action: "agent.budget.decline", reason: "grant_revoked", actor: `agent:${o.agentPrincipalId}` });
    expect(audits.map((a) => a.subject)).to.have.members(drafts.map((d) => d.agentPrincipalId));
    expect(await stack.core.db("budget_endings").whereIn("budget_id", stack.core.db("budgets").select("id").where({ user_id: o.userId }))).to.deep.equal([]);
    // A newly authorized agent is not held back by what the killed ones asked for.
    await draft(await grantFor(stack, o));
    await expectLedgerBalanced(stack);
  });

  it("the owner's revoke of one grant declines only its lineage's drafts; the owner's kill switch the rest; a stranger's touches none", async () => {
    const { o, session } = await owner();
    const [one, other] = [await grantFor(stack, o), await grantFor(stack, o)];
    const mine = await draft(one);
    const theirs = await draft(other);
    await stack.clients.grants.revokeUserGrant({ sessionToken: session, grantId: jtiOf(one) });
    expect([await statusOf(mine.vaultId), await statusOf(theirs.vaultId)]).to.deep.equal(["declined", "draft"]);
    const stranger = await owner();
    const kept = await draft(await grantFor(stack, stranger.o));
    await stack.clients.grants.killSwitch({ sessionToken: session });
    expect([await statusOf(theirs.vaultId), await statusOf(kept.vaultId)]).to.deep.equal(["declined", "draft"]);
    const audits = await stack.core.db("audit_records").where({ action: "agent.budget.decline", reason: "grant_revoked", actor: `user:${o.userId}` });
    expect(audits.map((a) => a.subject)).to.have.members([mine.agentPrincipalId, theirs.agentPrincipalId]);
    // The stranger's draft is still theirs to activate.
    await stack.clients.budgets.activateBudget({ sessionToken: stranger.session, agentPrincipalId: kept.agentPrincipalId });
    expect(await statusOf(kept.vaultId)).to.equal("active");
  });

  it("a revoked agent's draft left unended (a crash after the revoke) is not activatable nor counted, and the reaper declines it", async () => {
    const { o, session } = await owner();
    const agent = await grantFor(stack, o);
    const drafts = [];
    for (let i = 0; i < 50; i++) drafts.push(await draft(agent));
    const child: TestOwner = { userId: o.userId, vaultId: drafts[0]!.vaultId, agentPrincipalId: drafts[0]!.agentPrincipalId };
    await stack.clients.budgets.fundBudget({ sessionToken: session, vaultId: child.vaultId, amountCents: 10_000n, idempotencyKey: `f-${randomUUID()}` });
    // What the revoking transaction commits, without the endings that follow it.
    await stack.core
      .db("grants")
      .where({ id: jtiOf(agent) })
      .update({ state: "revoked", state_reason: "kill_switch", state_changed_at: stack.clock() });
    const db = stack.core.db;
    await db("budget_endings").insert(
      db("budgets")
        .whereIn(
          "vault_id",
          drafts.map((d) => d.vaultId),
        )
        .select("id", db.raw("?::timestamptz", [stack.clock()])),
    );
    const refused = await expectRefused(
      stack.clients.budgets.activateBudget({ sessionToken: session, agentPrincipalId: child.agentPrincipalId }),
      Reason.NOT_FOUND,
    );
    expect(refused.message).to.equal("the agent that asked for this budget was revoked; the draft is declined");
    expect(await statusOf(child.vaultId)).to.equal("draft");
    await draft(await grantFor(stack, o));
    await stack.admin.budgets.reapProvisioning({});
    expect(new Set(await Promise.all(drafts.map((d) => statusOf(d.vaultId))))).to.deep.equal(new Set(["declined"]));
    expect(await balanceOf(stack, o.vaultId)).to.equal(100_000);
    const reaped = await db("audit_records").where({ action: "agent.budget.decline", reason: "grant_revoked", actor: "reaper" });
    expect(reaped.map((a) => a.subject)).to.include.members(drafts.map((d) => d.agentPrincipalId));
    await expectLedgerBalanced(stack);
  });
});
