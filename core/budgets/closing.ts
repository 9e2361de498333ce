import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import type { ActingDeps } from "./caller.js";
import { sweepInto } from "./funding.js";
import type { BudgetRecord } from "./records.js";
import type { PaymentsStore } from "./stores/payments.js";
import type { VaultsStore } from "./stores/vaults.js";

export interface EndingDeps extends ActingDeps {
  vaults: VaultsStore;
  payments: PaymentsStore;
}

/** How a budget ends: closed (by an agent or its owner) or declined (its owner refused the draft). */
export interface Ending {
  status: "closed" | "declined";
  /** Who ends it, for the audit rows of the budgets below it. */
  actor: string;
  /** False keeps the money where it is (keep_funds on a close). */
  sweep: boolean;
  now: Date;
}

/**
 * Ends a budget, locked by the caller, and closes every open budget below it in the same
 * transaction: grants revoked, open payments declined, policies frozen and, with `sweep`, all
 * money below (kept money of budgets closed before included) moved up to `root`'s parent.
 */
export async function endBudgetTree(deps: EndingDeps, trx: Knex.Transaction, ctx: Pick<HandlerContext, "values">, root: BudgetRecord, e: Ending) {
  // Every budget below, top-down and locked (closed ones too: their kept money may move).
  const all = await deps.budgets.lockDescendants(trx, root.userId, root.vaultId);
  const open = all.filter((d) => d.status !== "closed");
  const vaultIds = [root.vaultId, ...open.map((x) => x.vaultId)];
  // Grants before vaults (the lock order): from here on none of them pays, and none can
  // be refreshed into a new one.
  const revoked = await deps.grants.revokeVaultGrants(trx, root.userId, vaultIds, e.now, e.status === "closed" ? "budget_closed" : "budget_declined");
  const vaults = await deps.vaults.lockVaults(trx, [root.parentVaultId, ...vaultIds, ...all.filter((d) => d.status === "closed").map((d) => d.vaultId)]);
  for (const id of [root.parentVaultId, root.vaultId, ...all.map((d) => d.vaultId)]) {
    const v = vaults.get(id);
    if (!v || v.ownerUserId !== root.userId) fail(Reason.NOT_FOUND, "no such budget");
  }
  // A payment waiting for the owner (or approved and not yet repeated) never completes.
  await deps.payments.declineOpenPayments(trx, vaultIds, e.now);
  // The policies are frozen: a grant issued on these vaults later still pays nothing.
  const frozen = e.status === "closed" ? vaultIds : vaultIds.slice(1);
  if (frozen.length > 0) await deps.budgets.closePolicies(trx, frozen, e.now);
  // Whether its money went up is kept with the budget: a refund arriving later follows the same way.
  // A declined budget's owner already sent its money up: a later close with keep_funds cannot undo that.
  const keepsFunds = (x: BudgetRecord) => !e.sweep && x.status !== "declined";
  const ended = await deps.budgets.updateBudget(
    trx,
    root.id,
    e.status === "closed" ? { status: "closed", closedAt: e.now, keepsFunds: keepsFunds(root) } : { status: "declined", keepsFunds: keepsFunds(root) },
    e.now,
  );
  // A decline's own audit row is the owner's decision (owner-decision.ts).
  if (e.status === "closed") await audit(deps, trx, ctx, e, "agent.budget.close", root.vaultId, "");
  for (const x of open) {
    await deps.budgets.updateBudget(trx, x.id, { status: "closed", closedAt: e.now, keepsFunds: keepsFunds(x) }, e.now);
    await audit(deps, trx, ctx, e, "agent.budget.close", x.vaultId, e.status === "declined" ? "parent_declined" : "");
  }
  // Deepest first, each budget's money goes up to its parent, so what the budgets below
  // held reaches the vault `root` was made under.
  let swept = { sweptCents: 0, transferId: "" };
  if (e.sweep) {
    const openIds = new Set(open.map((x) => x.id));
    for (const x of [...all].reverse()) {
      // A budget closed before this call kept its money: each such sweep is a movement of its own.
      const moved = await sweepInto(deps, trx, x, vaults, openIds.has(x.id) ? "close" : "kept", e.now);
      if (!openIds.has(x.id) && moved.sweptCents > 0) await audit(deps, trx, ctx, e, "agent.budget.sweep", x.vaultId, "");
    }
    // A draft declined before (by a release that left its tree open) made its decline's movement then.
    const why = e.status === "closed" ? "close" : root.status === "declined" ? "kept" : "decline";
    swept = await sweepInto(deps, trx, root, vaults, why, e.now);
    // What the budgets closed before kept went up with it, and so does anything refunded to them later.
    const keptBefore = all.filter((x) => !openIds.has(x.id));
    await deps.budgets.markSweptUp(trx, keptBefore, e.now);
  }
  return { ended, revoked, swept, currency: vaults.get(root.vaultId)!.currency };
}

function audit(deps: EndingDeps, trx: Knex.Transaction, ctx: Pick<HandlerContext, "values">, e: Ending, action: string, subject: string, reason: string) {
  return deps.audit.append(trx, { ...callFacts(ctx), actor: e.actor, action, outcome: "success", reason, subject, at: e.now });
}
