import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { derivedUuid } from "../../lib/crypto.js";
import type { AuditStore } from "../audit/store.js";
import type { AroundRefund, Refund } from "../settlement/ledger.js";
import type { SignCheck } from "../settlement/store.js";
import { MAX_AMOUNT } from "./policy.js";
import type { VaultRecord } from "./records.js";
import { budgetsStore } from "./stores/budgets.js";
import { createPaymentsStore } from "./stores/payments.js";
import { vaultsStore } from "./stores/vaults.js";

/** The audit actor of a movement the settlement worker makes. */
const ACTOR = "settlement";

/**
 * A payment not yet signed is never paid once its budget was closed or declined, or the grant that made it
 * revoked (owner, kill switch, client, reused refresh token): it is cancelled. While its user's account is
 * not active it is held, unsigned: paid if the account is active again before it expires, else refunded.
 */
export function paymentsSignCheck(db: Db): SignCheck {
  const payments = createPaymentsStore(db);
  return (ps, trx) =>
    payments.withheldAmong(
      trx ?? db,
      ps.map((p) => ({ id: p.paymentId, vaultId: p.vaultId })),
    );
}

/**
 * A failed payment's refund follows its budget's close (core/settlement calls this around the
 * refund): into a budget that ended and sent its money up, the refunded amount goes up to the parent
 * as a sweep would, and on past every such budget above, stopping at an open, kept or user's vault.
 */
export function refundsFollowCloses(deps: { audit: AuditStore }): AroundRefund {
  return async (trx, r, refund) => {
    // Ancestry never changes: every vault the refund may reach is locked in one call (lockVaults'
    // order) before the refund touches any, so it never waits in a cycle with a close, sweep or funding.
    const path = await budgetsStore.refundPath(trx, r.vaultId);
    const vaults = await vaultsStore.lockVaults(
      trx,
      path.map((s) => s.vaultId),
    );
    if (!(await refund())) return;
    // Read again under the locks: a close of any of these committed before them, or waits for this one.
    for (const step of await budgetsStore.refundPath(trx, r.vaultId)) {
      if (!step.sweptUp || step.parentVaultId === null) return;
      if (!(await sweepRefundUp(deps, trx, r, vaults, step.vaultId, step.parentVaultId))) return;
    }
  };
}

/** One level up; false when it stays (a parent at the largest balance: listed as stranded funds). */
async function sweepRefundUp(deps: { audit: AuditStore }, trx: Knex.Transaction, r: Refund, vaults: Map<string, VaultRecord>, fromId: string, toId: string) {
  const from = vaults.get(fromId);
  const to = vaults.get(toId);
  if (!from || !to || to.balanceCents + r.amountCents > MAX_AMOUNT) return false;
  // Derived from the payment: a replayed refund names the same movements and adds nothing.
  const moved = await vaultsStore.moveBetweenVaults(trx, from, to, r.amountCents, {
    id: derivedUuid("budget.sweep", fromId, "refund", r.paymentId),
    kind: "budget.sweep",
    reference: `budget:${fromId}`,
    at: r.at,
  });
  if (!moved.moved) return false;
  vaults.set(fromId, moved.from);
  vaults.set(toId, moved.to);
  await deps.audit.append(trx, {
    requestId: `settlement:${r.paymentId}`,
    actor: ACTOR,
    action: "agent.budget.sweep",
    outcome: "success",
    reason: "payment_refund",
    subject: fromId,
    at: r.at,
  });
  return true;
}
