import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { BatchItemInput } from "./batch-request.js";
import type { ExecutionRecord } from "./records.js";
import type { TreasuryStore } from "./store.js";
import { PAYOUTS_RECEIVE } from "./wire.js";

/**
 * Sorts items into new ones and ones already executed with identical fields; any
 * reuse with a changed field fails the whole batch (execution_conflict).
 * A payout_id already paid under another execution_id is a conflict too.
 */
export async function planItems(
  store: Pick<TreasuryStore, "findExecutions">,
  trx: Knex.Transaction,
  partnerId: string,
  payerEntityId: string,
  items: BatchItemInput[],
  inserted: Set<string>,
) {
  const reused = items.filter((i) => !inserted.has(i.executionId));
  const already = new Map<string, ExecutionRecord>();
  if (reused.length === 0) return { already };
  const existing = await store.findExecutions(
    trx,
    partnerId,
    reused.map((i) => i.executionId),
    reused.map((i) => i.payoutId),
  );
  const byExecution = new Map(existing.map((e) => [e.executionId, e]));
  const byPayout = new Map(existing.map((e) => [e.payoutId, e]));
  for (const [index, item] of items.entries()) {
    if (inserted.has(item.executionId)) continue;
    const earlier = byExecution.get(item.executionId);
    if (earlier) {
      const same =
        earlier.payoutId === item.payoutId &&
        earlier.recipientUserId === item.recipientUserId &&
        earlier.payerEntityId === payerEntityId &&
        earlier.amountCents === item.amountCents &&
        earlier.currency === item.currency &&
        earlier.reference === item.reference;
      if (!same) fail(Reason.EXECUTION_CONFLICT, `items[${index}].execution_id was executed before with different fields`);
      already.set(item.executionId, earlier);
    } else if (byPayout.has(item.payoutId)) {
      fail(Reason.EXECUTION_CONFLICT, `items[${index}].payout_id was paid before under another execution_id`);
    } else {
      throw new Error("an execution was skipped as a duplicate but no earlier execution matches it");
    }
  }
  return { already };
}

/** Recipients of new payouts must exist, be active and have granted payouts:receive to this partner. */
export async function checkRecipients(store: Pick<TreasuryStore, "recipients">, trx: Knex.Transaction, partnerId: string, items: BatchItemInput[]) {
  if (items.length === 0) return;
  const recipients = new Map((await store.recipients(trx, partnerId, [...new Set(items.map((i) => i.recipientUserId))])).map((r) => [r.userId, r]));
  for (const item of items) {
    const r = recipients.get(item.recipientUserId);
    // An unknown user and a user without consent answer alike: no existence oracle.
    if (!r?.scopes.includes(PAYOUTS_RECEIVE)) {
      fail(Reason.GRANT_REQUIRED, `recipient ${item.recipientUserId} has not granted ${PAYOUTS_RECEIVE} to this partner`);
    }
    if (r.status !== "active") fail(Reason.USER_INACTIVE, `recipient ${item.recipientUserId} is not active`);
  }
}
