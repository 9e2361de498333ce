import { randomUUID } from "node:crypto";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { create, fromBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { BatchSchema, EdgeRejection, ItemStatus, type TreasuryService } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { callFacts } from "../context.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { PartnerRecord, PartnersStore } from "../partners/store.js";
import type { PartnerAccess, PartnerPrincipal } from "../partners/access.js";
import type { PartnerTokenVerifier } from "../partners/access-token.js";
import { TREASURY_SCOPE } from "../partners/scopes.js";
import { encodeBatch } from "./batch-encoding.js";
import { canonicalBatchHash, validateBatch } from "./batch-request.js";
import { exceededLimit, utcDay } from "./policy.js";
import type { BatchRecord } from "./records.js";
import type { TreasuryStore } from "./store.js";
import { UUID } from "../uuid.js";
import { checkRecipients, planItems } from "./batch-plan.js";
import { cents, EDGE_REJECTIONS, MAX_CENTS, optionalCents, PAYOUTS_RECEIVE, reasonLabel, statusName, toProto } from "./wire.js";

/** Test-only seams for failures that cannot be caused for real (STYLE: deliberate seams). */
export interface TreasuryFaults {
  /** Runs inside the batch transaction after every write, just before COMMIT. */
  beforeCommit?: (batchId: string) => Promise<void>;
  /** Runs after COMMIT, before the answer leaves (a crash here loses only the response). */
  afterCommit?: (batchId: string) => Promise<void>;
}

export interface TreasuryServiceDeps {
  db: Db;
  store: TreasuryStore;
  partners: PartnersStore;
  /** The partner access checks: token, partner active, rate limit, user and consent. */
  access: PartnerAccess;
  audit: AuditStore;
  clock: () => Date;
  /** Names the partner of an edge-rejected request (signature and lifetime only). */
  tokens: PartnerTokenVerifier;
  faults?: TreasuryFaults;
}

const BATCH_ACTION = "treasury.batch.execute";
/** Audit actor of a request whose token proves no partner. */
const ANONYMOUS = "anonymous";

export function createTreasuryService(deps: TreasuryServiceDeps): ServiceImpl<typeof TreasuryService> {
  const { db, store, audit } = deps;

  async function appendAudit(conn: Knex | Knex.Transaction, ctx: HandlerContext, entry: { actor: string; action: string; subject: string; reason?: string }) {
    try {
      await audit.append(conn, { ...callFacts(ctx), outcome: entry.reason ? "failure" : "success", at: deps.clock(), ...entry });
    } catch (err) {
      fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
    }
  }

  /**
   * The partner-level access checks, then treasury:write in the token (an entitlement, never consent).
   * A missing or invalid bearer proves no partner and writes no audit row, so a flood cannot grow the
   * trail; unusable signing keys are audited under "anonymous".
   */
  async function treasuryCaller(ctx: HandlerContext, token: string, operation: string, action: string, subject: string): Promise<PartnerPrincipal> {
    let principal: PartnerPrincipal;
    try {
      principal = await deps.access.authorize(ctx, { token, operation });
    } catch (err) {
      const reason = errorDetailOf(err)?.reason;
      if (reason === Reason.AUTH_UNAVAILABLE) {
        await appendAudit(db, ctx, { actor: ANONYMOUS, action, subject, reason: reasonLabel(reason) });
      }
      throw err;
    }
    if (!principal.tokenScopes.includes(TREASURY_SCOPE)) {
      await appendAudit(db, ctx, { actor: principal.actor, action: `partner.${operation}`, subject: principal.clientId, reason: "grant_required" });
      fail(Reason.GRANT_REQUIRED, `the access token lacks ${TREASURY_SCOPE}`);
    }
    return principal;
  }

  async function partnerForAdmin(clientId: string): Promise<PartnerRecord> {
    const partner = clientId ? await deps.partners.findByClientId(clientId) : undefined;
    if (!partner) fail(Reason.NOT_FOUND, "no such partner");
    return partner;
  }

  /** Runs an admin change in one transaction with its audit row. */
  function adminChange<T>(ctx: HandlerContext, action: string, subject: string, work: (trx: Knex.Transaction) => Promise<T>) {
    return db.transaction(async (trx) => {
      const result = await work(trx);
      await appendAudit(trx, ctx, { actor: "admin", action, subject });
      return result;
    });
  }

  /** A stored success for the key: the same request replays it, any other is a conflict. */
  function replay(earlier: BatchRecord, requestHash: string) {
    if (earlier.requestHash !== requestHash) {
      fail(Reason.IDEMPOTENCY_CONFLICT, "this Idempotency-Key was used with a different request");
    }
    return { batch: fromBinary(BatchSchema, earlier.response), replayed: true };
  }

  return {
    async bindTreasury(req, ctx) {
      const partner = await partnerForAdmin(req.clientId);
      if (!UUID.test(req.payerEntityId)) fail(Reason.INVALID_REQUEST, "payer_entity_id must be a UUID");
      const currency = req.currency === "" ? "USD" : req.currency;
      if (!/^[A-Z]{3}$/.test(currency)) fail(Reason.INVALID_REQUEST, "currency must be an ISO 4217 code in upper case");
      const limits = {
        balanceCents: cents(req.balanceCents, "balance_cents"),
        capPerItemCents: optionalCents(req.capPerItemCents, "cap_per_item_cents"),
        capPerDayCents: optionalCents(req.capPerDayCents, "cap_per_day_cents"),
        capLifetimeCents: optionalCents(req.capLifetimeCents, "cap_lifetime_cents"),
        stepUpAmountCents: optionalCents(req.stepUpAmountCents, "step_up_amount_cents"),
      };
      const result = await adminChange(ctx, "treasury.bind", partner.clientId, (trx) =>
        store.bind(trx, { partnerId: partner.id, payerEntityId: req.payerEntityId.toLowerCase(), currency, ...limits }, { id: randomUUID(), at: deps.clock() }),
      );
      return { treasury: toProto(partner, result.treasury), created: result.created };
    },

    async setTreasuryStatus(req, ctx) {
      const partner = await partnerForAdmin(req.clientId);
      const status = statusName[req.status];
      if (!status) fail(Reason.INVALID_REQUEST, "status is required");
      const treasury = await adminChange(ctx, `treasury.set_status.${status}`, partner.clientId, async (trx) => {
        if (!(await store.lock(trx, partner.id))) fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
        return (await store.setStatus(trx, partner.id, status, deps.clock()))!;
      });
      return { treasury: toProto(partner, treasury) };
    },

    async fundTreasury(req, ctx) {
      const partner = await partnerForAdmin(req.clientId);
      const amount = cents(req.amountCents, "amount_cents");
      if (amount === 0) fail(Reason.INVALID_REQUEST, "amount_cents must be at least 1");
      const treasury = await adminChange(ctx, "treasury.fund", partner.clientId, async (trx) => {
        const locked = await store.lock(trx, partner.id);
        if (!locked) fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
        if (locked.balanceCents + amount > MAX_CENTS) fail(Reason.INVALID_REQUEST, `the balance would exceed ${MAX_CENTS} cents`);
        return store.fund(trx, locked, amount, { id: randomUUID(), at: deps.clock() });
      });
      return { treasury: toProto(partner, treasury) };
    },

    async getTreasury(req, ctx) {
      if (req.edgeRejection !== EdgeRejection.UNSPECIFIED) return rejectAtEdge(ctx, req.accessToken, req.edgeRejection, "", "partner.treasury.read");
      const caller = await treasuryCaller(ctx, req.accessToken, "treasury.read", "partner.treasury.read", "");
      const treasury = await store.find(caller.partnerId);
      if (!treasury) {
        await appendAudit(db, ctx, { actor: caller.actor, action: "partner.treasury.read", subject: caller.clientId, reason: "treasury_not_configured" });
        fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
      }
      // A read is withheld when its audit row cannot be written.
      await deps.access.audited(ctx, caller, "treasury.read", caller.clientId);
      return { treasury: toProto(caller, treasury) };
    },

    async executeBatch(req, ctx) {
      const subject = req.idempotencyKey.slice(0, 255);
      if (req.edgeRejection !== EdgeRejection.UNSPECIFIED) return rejectAtEdge(ctx, req.accessToken, req.edgeRejection, subject);
      const caller = await treasuryCaller(ctx, req.accessToken, "treasury.payout", BATCH_ACTION, subject);
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

        const outcome = await db.transaction(async (trx) => {
          const treasury = await store.lock(trx, partner.id);
          // Idempotency is read under the lock, so a request with this key committed while we
          // waited is seen. No treasury means no batch can exist, so that refusal can come first.
          if (!treasury) fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
          const earlier = await store.findBatch(partner.id, input.idempotencyKey, trx);
          if (earlier) return { replay: earlier, batch: undefined };

          if (treasury.status !== "active") fail(Reason.TREASURY_INACTIVE, `treasury is ${treasury.status.replace("_", " ")}`);
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

          const today = utcDay(now);
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
          await appendAudit(trx, ctx, { actor, action: BATCH_ACTION, subject: batchId });
          await deps.faults?.beforeCommit?.(batchId);
          return { replay: undefined, batch };
        });

        if (outcome.replay) {
          const replayed = replay(outcome.replay, requestHash);
          await appendAudit(db, ctx, { actor, action: "treasury.batch.replay", subject: outcome.replay.id });
          return replayed;
        }
        await deps.faults?.afterCommit?.(outcome.batch.batchId);
        return { batch: outcome.batch, replayed: false };
      } catch (err) {
        // Rejections are audited; the rollback above consumed no ids.
        const detail = errorDetailOf(err);
        if (detail && detail.reason !== Reason.AUDIT_UNAVAILABLE) {
          await appendAudit(db, ctx, { actor, action: BATCH_ACTION, subject: req.idempotencyKey.slice(0, 255), reason: reasonLabel(detail.reason) });
        }
        throw err;
      }
    },

    async getPayout(req, ctx) {
      // The access-check order for user resources: token, partner, rate limit, user known to
      // this partner, user active, payouts:receive in both token and consent.
      const caller = await deps.access.authorize(ctx, { token: req.accessToken, operation: "payouts.read", userId: req.userId, scope: PAYOUTS_RECEIVE });
      const userId = req.userId.toLowerCase();
      if (req.payoutId.length === 0 || req.payoutId.length > 128) fail(Reason.INVALID_REQUEST, "payout id must be 1 to 128 characters");
      const payout = await store.findPayout(caller.partnerId, userId, req.payoutId);
      if (!payout) {
        await appendAudit(db, ctx, { actor: caller.actor, action: "partner.payouts.read", subject: userId, reason: "not_found" });
        fail(Reason.NOT_FOUND, "no such payout for this user");
      }
      await deps.access.audited(ctx, caller, "payouts.read", `${userId}/${payout.payoutId}`);
      return {
        payout: {
          payoutId: payout.payoutId,
          executionId: payout.executionId,
          batchId: payout.batchId,
          userId: payout.recipientUserId,
          amountCents: BigInt(payout.amountCents),
          currency: payout.currency,
          reference: payout.reference,
          status: "executed",
          executedAt: timestampFromDate(payout.executedAt),
        },
      };
    },
  };

  /**
   * A batch request the gateway refused before reading it: audited under the partner the token
   * proves (none proved, no row), answering the gateway's error or audit_unavailable.
   */
  async function rejectAtEdge(ctx: HandlerContext, token: string, rejection: EdgeRejection, subject: string, action = BATCH_ACTION): Promise<never> {
    const edge = EDGE_REJECTIONS[rejection];
    if (!edge) return fail(Reason.INVALID_REQUEST, "unknown edge_rejection");
    let actor: string | undefined;
    if (token !== "") {
      try {
        actor = `partner:${(await deps.tokens.verify(token)).clientId}`;
      } catch {
        // Unverifiable: the request proves no partner.
      }
    }
    if (actor) await appendAudit(db, ctx, { actor, action, subject, reason: edge.label });
    return fail(edge.reason, edge.message);
  }
}
