import { randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import {
  BatchSchema,
  EdgeRejection,
  ItemStatus,
  type ExecuteBatchRequest,
  type ExecuteBatchResponseSchema,
} from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { callerTransaction } from "../deadlines.js";
import { encodeBatch } from "./batch-encoding.js";
import { checkRecipients, planItems } from "./batch-plan.js";
import { canonicalBatchHash, validateBatch } from "./batch-request.js";
import { appendAudit, BATCH_ACTION, rejectAtEdge, treasuryCaller, type CallerDeps, type EdgeDeps } from "./caller.js";
import { exceededLimit, utcDay } from "./policy.js";
import type { BatchRecord, TreasuryStatusName } from "./records.js";
import type { PartnersStore } from "../partners/store.js";
import type { TreasuryStore } from "./store.js";
import { reasonLabel } from "./wire.js";
import { quotedExcerpt } from "../../lib/text.js";

/** What a partner is told when its treasury is not active, per status. */
const INACTIVE_MESSAGE: Record<Exclude<TreasuryStatusName, "active">, string> = {
  suspended: "the treasury is suspended",
  disabled: "the treasury is disabled",
  mandate_expired: "the treasury's mandate has expired",
};

/** Test-only seams for failures that cannot be caused for real, named and typed, never reached in production. */
export interface TreasuryFaults {
  /** Runs inside the batch transaction after every write, just before COMMIT. */
  beforeCommit?: (batchId: string) => Promise<void>;
  /** Runs after COMMIT, before the answer leaves (a crash here loses only the response). */
  afterCommit?: (batchId: string) => Promise<void>;
}

/** What TreasuryService.ExecuteBatch needs. */
export interface ExecuteBatchDeps extends CallerDeps, EdgeDeps {
  store: Pick<TreasuryStore, "lock" | "findBatch" | "insertExecutions" | "findExecutions" | "recipients" | "recordBatch">;
  partners: Pick<PartnersStore, "holdStatus">;
  faults?: TreasuryFaults;
}

/** A stored success for the key: the same request replays it, any other is a conflict. */
function replay(earlier: BatchRecord, requestHash: string) {
  if (earlier.requestHash !== requestHash) {
    fail(Reason.IDEMPOTENCY_CONFLICT, "this Idempotency-Key was used with a different request");
  }
  return { batch: fromBinary(BatchSchema, earlier.response), replayed: true };
}

/** TreasuryService.ExecuteBatch: pays a batch of payouts from the caller's treasury, once per Idempotency-Key. */
export async function executeBatch(
  deps: ExecuteBatchDeps,
  req: ExecuteBatchRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ExecuteBatchResponseSchema>> {
  const { db, store } = deps;
  const subject = quotedExcerpt(req.idempotencyKey, 255);
  if (req.edgeRejection !== EdgeRejection.UNSPECIFIED) return rejectAtEdge(deps, ctx, req.accessToken, req.edgeRejection, subject);
  const caller = await treasuryCaller(deps, ctx, req.accessToken, "treasury.payout", BATCH_ACTION, subject);
  const partner = { id: caller.partnerId, clientId: caller.clientId };
  const actor = caller.actor;
  try {
    if (req.bodyProblem) fail(Reason.INVALID_REQUEST, req.bodyProblem);
    // Check order: body validation, idempotency, configured, active, payer,
    // execution conflicts, currency/recipients/consent, caps and step-up, funds.
    const validation = validateBatch({
      idempotencyKey: req.idempotencyKey,
      payerEntityId: req.payerEntityId,
      items: req.items,
    });
    if (!validation.ok) fail(Reason.INVALID_REQUEST, validation.message);
    const input = validation.batch;
    const requestHash = canonicalBatchHash(input);

    const outcome = await callerTransaction(db, ctx.signal, "before the batch began", async (trx) => {
      const treasury = await store.lock(trx, partner.id);
      // Idempotency is read under the lock, so a request with this key committed while we
      // waited is seen. No treasury means no batch can exist, so that refusal can come first.
      if (!treasury) fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
      // Read again under the lock: a suspension committed since the access check stops the batch.
      if ((await deps.partners.holdStatus(trx, partner.id)) !== "active") fail(Reason.PARTNER_INACTIVE, "the partner is not active");
      const earlier = await store.findBatch(partner.id, input.idempotencyKey, trx);
      if (earlier) return { replay: earlier, batch: undefined };

      if (treasury.status !== "active") fail(Reason.TREASURY_INACTIVE, INACTIVE_MESSAGE[treasury.status]);
      if (input.payerEntityId !== treasury.payerEntityId) fail(Reason.PAYER_NOT_ALLOWED, "payer_entity_id is not the one bound to this treasury");

      // Every item is inserted as if new; the unique keys on (partner, execution_id) and
      // (partner, payout_id) skip the reused ones, and only those are read back. Any
      // later refusal rolls the inserts back with the rest.
      const now = deps.clock();
      const batchId = randomUUID();
      const inserted = await store.insertExecutions(
        trx,
        input.items.map((item) => ({
          partnerId: partner.id,
          batchId,
          payerEntityId: input.payerEntityId,
          executedAt: now,
          executionId: item.executionId,
          payoutId: item.payoutId,
          recipientUserId: item.recipientUserId,
          amountCents: item.amountCents,
          currency: item.currency,
          reference: item.reference,
        })),
      );
      const plan = await planItems(store, trx, partner.id, input.payerEntityId, input.items, inserted);
      const fresh = input.items.filter((item) => !plan.already.has(item.executionId));

      const otherCurrency = fresh.findIndex((item) => item.currency !== treasury.currency);
      if (otherCurrency !== -1)
        fail(Reason.INVALID_REQUEST, `items[${input.items.indexOf(fresh[otherCurrency]!)}].currency must be the treasury's currency ${treasury.currency}`);
      await checkRecipients(store, trx, partner.id, fresh);

      // A batch stamped before the treasury's last day (a replica's clock behind) counts towards that
      // later day, so its total is never forgotten and the day's cap holds.
      const today = treasury.spentDay !== null && treasury.spentDay > utcDay(now) ? treasury.spentDay : utcDay(now);
      const amounts = fresh.map((i) => i.amountCents);
      const limit = exceededLimit(treasury, amounts, today);
      // Name the limit, never the remaining allowance.
      if (limit) fail(Reason.POLICY_DENIED, `the batch exceeds the treasury's ${limit} limit`, { limitName: limit });
      const total = amounts.reduce((a, b) => a + b, 0);
      if (total > treasury.balanceCents) fail(Reason.INSUFFICIENT_FUNDS, "the available balance is below the batch total");

      const executedNow = timestampFromDate(now);
      const batch = create(BatchSchema, {
        batchId,
        payerEntityId: input.payerEntityId,
        totalCents: BigInt(total),
        createdAt: executedNow,
        items: input.items.map((item) => {
          const done = plan.already.get(item.executionId);
          return {
            executionId: item.executionId,
            payoutId: item.payoutId,
            status: done ? ItemStatus.ALREADY_EXECUTED : ItemStatus.EXECUTED,
            executedAt: done ? timestampFromDate(done.executedAt) : executedNow,
          };
        }),
      });
      const response = encodeBatch(batch);
      const dayCents = (treasury.spentDay === today ? treasury.spentDayCents : 0) + total;
      // One statement records the batch, the debit, the ledger transaction and the events (one
      // payout.executed per batch, not per payout; transfer.settled per payout to partners the recipient
      // lets read transfers), so none of them can exist without the others (store.ts recordBatch).
      const stored = await store.recordBatch(
        trx,
        { id: batchId, partnerId: partner.id, idempotencyKey: input.idempotencyKey, requestHash, response, createdAt: now },
        { amountCents: total, day: today, dayCents },
        fresh.length === 0
          ? undefined
          : {
              currency: treasury.currency,
              items: fresh,
              executedEvent: {
                batch_id: batchId,
                payer_entity_id: input.payerEntityId,
                currency: treasury.currency,
                total_cents: total,
                executed_at: now.toISOString(),
                payouts: fresh.map((item) => ({
                  payout_id: item.payoutId,
                  execution_id: item.executionId,
                  user_id: item.recipientUserId,
                  amount_cents: item.amountCents,
                  reference: item.reference,
                })),
              },
            },
      );
      // Unreachable while every batch takes the treasury lock first; fail closed if not.
      if (!stored.inserted) throw new Error("idempotency key taken under the treasury lock");
      await appendAudit(deps, trx, ctx, { actor, action: BATCH_ACTION, subject: batchId });
      await deps.faults?.beforeCommit?.(batchId);
      return { replay: undefined, batch };
    });

    if (outcome.replay) {
      const replayed = replay(outcome.replay, requestHash);
      await appendAudit(deps, db, ctx, { actor, action: "treasury.batch.replay", subject: outcome.replay.id });
      return replayed;
    }
    await deps.faults?.afterCommit?.(outcome.batch.batchId);
    return { batch: outcome.batch, replayed: false };
  } catch (err) {
    // Rejections are audited; the rollback above consumed no ids.
    const detail = errorDetailOf(err);
    if (detail && detail.reason !== Reason.AUDIT_UNAVAILABLE) {
      await appendAudit(deps, db, ctx, { actor, action: BATCH_ACTION, subject: quotedExcerpt(req.idempotencyKey, 255), reason: reasonLabel(detail.reason) });
    }
    throw err;
  }
}
