import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { PaymentStatus } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import { budgetUnderRoot } from "./budget-life.js";
import { budgetParams, grantFor, payment, type TestOwner } from "./budgets.js";
import { freshAddress } from "./evm-rail.js";
import type { TestStack } from "./stack.js";

/** Code that reverts any call: mined with it as the token's code, a transfer reverts. */
export const REVERTS = "0x60006000fd";

export const idempotencyKey = () => `k-${randomUUID()}`;

/** A budget on base created by `token`'s agent (active at once), funded with `cents` from that agent's vault; the budget as its own agent. */
export async function subBudget(stack: TestStack, owner: { userId: string }, token: string, cents: bigint): Promise<TestOwner> {
  const { budget } = await stack.clients.budgets.createBudget({
    accessToken: token,
    ...budgetParams({ stepUpAmountCents: undefined, chainAllowlist: ["base"] }),
  });
  await stack.clients.budgets.fundBudget({ accessToken: token, vaultId: budget!.vaultId, amountCents: cents, idempotencyKey: idempotencyKey() });
  return { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
}

/** A payment of `cents` from `budget` to a fresh address on base (evm rail), accepted and not signed yet; its id. */
export async function payFrom(stack: TestStack, budget: TestOwner, cents: number): Promise<string> {
  const { payment: p } = await stack.clients.budgets.initiatePayment({
    accessToken: await grantFor(stack, budget),
    payment: payment({ amountCents: BigInt(cents), address: freshAddress() }),
  });
  expect(p!.status).to.equal(PaymentStatus.PENDING);
  return p!.paymentId;
}

/** A payment's settlement as `status:failure_reason`. */
export async function settlementOf(stack: TestStack, paymentId: string): Promise<string> {
  const row = await stack.core.db("settlement_payments").where({ payment_id: paymentId }).first("status", "failure_reason");
  return `${row.status}:${row.failure_reason}`;
}

/**
 * Puts a failed payment back to pending, due now: the worker's next pass fails it again and runs
 * its refund again, as a worker replaying a status change it had already made would.
 */
export async function replayFailure(stack: TestStack, paymentId: string): Promise<void> {
  await stack.core
    .db("settlement_payments")
    .where({ payment_id: paymentId, status: "failed" })
    .update({ status: "pending", failure_reason: null, final: false, lease_token: null, leased_until: null, next_attempt_at: stack.clock() });
}

/** The vaults of closed budgets `ListStrandedFunds` names, every page (stranded.ts). */
export { strandedVaults } from "./stranded.js";

/** The sweeps the settlement worker made: the audit rows of refunds that followed a close up, by vault. */
export async function refundSweeps(stack: TestStack, vaultIds: string[]): Promise<{ subject: string; actor: string; reason: string }[]> {
  return stack.core
    .db("audit_records")
    .whereIn("subject", vaultIds)
    .where({ action: "agent.budget.sweep", reason: "payment_refund" })
    .orderBy("seq")
    .select("subject", "actor", "reason");
}

/** The user's vault (10,000) and a budget on base funded 6,000 from it, as budgetUnderRoot answers them. */
export async function fundedBaseBudget(stack: TestStack) {
  const t = await budgetUnderRoot(stack, { parentCents: 10_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
  await stack.clients.budgets.fundBudget({ accessToken: t.parentToken, vaultId: t.child.vaultId, amountCents: 6_000n, idempotencyKey: idempotencyKey() });
  return t;
}

/** How many transactions were signed for a payment (transfers, bumps, cancellations). */
export async function signedTransactions(stack: TestStack, paymentId: string): Promise<number> {
  return Number((await stack.core.db("settlement_transactions").where({ payment_id: paymentId }).count<{ n: string }[]>("* as n"))[0]!.n);
}
