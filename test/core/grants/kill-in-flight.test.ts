import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { grantFor, ownerSession, payment } from "../../support/budgets.js";
import { expectRefused, reasonOf } from "../../support/refusals.js";
import { balanceOf, expectLedgerBalanced, fundedBudget, stepUpPayment } from "../../support/budget-life.js";
import { requirePostgres } from "../../support/db.js";

const jtiOf = (token: string) => (JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8")) as { jti: string }).jti;

/** The kill switch and an owner's revoke stop what the agents had waiting for approval (docs/reference/agent-tools.md). */
describe("Revoking grants declines their open payments", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  /** A funded budget (step-up above 5,000) and its owner's stepped-up session. */
  async function funded() {
    const { owner, child } = await fundedBudget(stack);
    return { owner, child, session: await ownerSession(stack, owner.userId, { stepUp: true }) };
  }
  const pending = (accessToken: string) => stepUpPayment(stack, accessToken);
  const statuses = async (ids: string[]) => (await stack.core.db("agent_payments").whereIn("id", ids).orderBy("id")).map((r) => r.status);

  it("an agent's killSwitch.all declines every open payment of the user: nothing moves, approving is refused, the waiting bound is free again", async () => {
    const { child, session } = await funded();
    const agent = await grantFor(stack, child);
    const ids = [];
    for (let i = 0; i < 50; i++) ids.push(await pending(agent));
    const full = await grantFor(stack, child);
    await expectRefused(stack.clients.budgets.initiatePayment({ accessToken: full, payment: payment({ amountCents: 7_000n }) }), Reason.POLICY_DENIED);
    await stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: ids[0]! });
    await stack.clients.grants.revokeAllGrants({ accessToken: await grantFor(stack, child), reason: "stop" });
    expect(new Set(await statuses(ids))).to.deep.equal(new Set(["declined"]));
    const refused = await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: ids[1]! }), Reason.NOT_FOUND);
    expect(refused.message).to.equal("the payment was declined");
    expect(await balanceOf(stack, child.vaultId)).to.equal(100_000);
    // A newly authorized agent is not held back by what the killed ones left.
    await pending(await grantFor(stack, child));
    expect((await stack.clients.budgets.listPendingApprovals({ sessionToken: session })).pendingPayments).to.have.length(1);
    await expectLedgerBalanced(stack);
  });

  it("the owner's kill switch does the same; the owner's revoke of one grant declines only that grant's lineage", async () => {
    const { child, session } = await funded();
    const [one, other] = [await grantFor(stack, child), await grantFor(stack, child)];
    const mine = await pending(one);
    const theirs = await pending(other);
    await stack.clients.grants.revokeUserGrant({ sessionToken: session, grantId: jtiOf(one) });
    expect(await statuses([mine])).to.deep.equal(["declined"]);
    expect(await statuses([theirs])).to.deep.equal(["pending_step_up"]);
    await stack.clients.grants.killSwitch({ sessionToken: session });
    expect(await statuses([theirs])).to.deep.equal(["declined"]);
    // A stranger's kill switch touches nothing of this user's.
    const stranger = await funded();
    const kept = await pending(await grantFor(stack, stranger.child));
    await stack.clients.grants.killSwitch({ sessionToken: session });
    expect(await statuses([kept])).to.deep.equal(["pending_step_up"]);
  });

  it("hostile agents making payments while the kill switch is pulled: none is left open, balances unchanged (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    for (let round = 0; round < 4; round++) {
      const { owner, child, session } = await funded();
      const agents = await Promise.all(Array.from({ length: 4 }, () => grantFor(stack, child)));
      const calls: Promise<unknown>[] = agents.flatMap((accessToken) =>
        Array.from({ length: 5 }, () => stack.clients.budgets.initiatePayment({ accessToken, payment: payment({ amountCents: 7_000n }) })),
      );
      const kill =
        round % 2 === 0
          ? stack.clients.grants.killSwitch({ sessionToken: session })
          : stack.clients.grants.revokeAllGrants({ accessToken: agents[0]!, reason: "" });
      calls.splice(round * 5, 0, kill);
      const settled = await Promise.allSettled(calls);
      for (const r of settled) if (r.status === "rejected") expect(reasonOf(r.reason)).to.equal(Reason.INVALID_TOKEN);
      const open = await stack.core.db("agent_payments").where({ user_id: owner.userId }).whereIn("status", ["pending_step_up", "approved"]);
      expect(open).to.deep.equal([]);
      expect(await balanceOf(stack, child.vaultId)).to.equal(100_000);
    }
    await expectLedgerBalanced(stack);
  });
});
