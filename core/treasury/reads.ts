import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import {
  EdgeRejection,
  type GetPayoutRequest,
  type GetPayoutResponseSchema,
  type GetTreasuryRequest,
  type GetTreasuryResponseSchema,
} from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { fail } from "../errors.js";
import { appendAudit, refuseAtEdge, treasuryCaller, type CallerDeps } from "./caller.js";
import type { TreasuryStore } from "./store.js";
import { isPartnerId, PARTNER_ID_RULE } from "../../lib/vocabulary.js";
import { PAYOUTS_RECEIVE, toProto } from "./wire.js";

/** What TreasuryService.GetTreasury needs. */
export interface GetTreasuryDeps extends CallerDeps {
  store: Pick<TreasuryStore, "find">;
}

/** What TreasuryService.GetPayout needs. */
export interface GetPayoutDeps extends CallerDeps {
  store: Pick<TreasuryStore, "findPayout">;
}

/** TreasuryService.GetTreasury: the caller's own treasury. */
export async function getTreasury(
  deps: GetTreasuryDeps,
  req: GetTreasuryRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof GetTreasuryResponseSchema>> {
  const caller = await treasuryCaller(deps, ctx, req.accessToken, "treasury.read", "partner.treasury.read", "");
  // A query the gateway does not take is refused like a batch's body problem: after the caller's
  // own checks, so a bad token is 401 and a suspended partner 403 whatever the query says.
  if (req.edgeRejection !== EdgeRejection.UNSPECIFIED) return refuseAtEdge(deps, ctx, caller.actor, req.edgeRejection, "", "partner.treasury.read");
  const treasury = await deps.store.find(caller.partnerId);
  if (!treasury) {
    await appendAudit(deps, deps.db, ctx, {
      actor: caller.actor,
      action: "partner.treasury.read",
      subject: caller.clientId,
      reason: "treasury_not_configured",
    });
    fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
  }
  // A read is withheld when its audit row cannot be written.
  await deps.access.audited(ctx, caller, "treasury.read", caller.clientId);
  return { treasury: toProto(caller, treasury) };
}

/** TreasuryService.GetPayout: one payout the caller made to a user who lets it read payouts. */
export async function getPayout(deps: GetPayoutDeps, req: GetPayoutRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GetPayoutResponseSchema>> {
  // The access-check order for user resources: token, partner, rate limit, user known to
  // this partner, user active, payouts:receive in both token and consent.
  const caller = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "payouts.read",
    userId: req.userId,
    scope: PAYOUTS_RECEIVE,
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  const userId = req.userId.toLowerCase();
  // An id no payout could have been written under is a request to fix, not an unknown payout.
  if (!isPartnerId(req.payoutId)) {
    await appendAudit(deps, deps.db, ctx, { actor: caller.actor, action: "partner.payouts.read", subject: userId, reason: "invalid_request" });
    fail(Reason.INVALID_REQUEST, `payout_id ${PARTNER_ID_RULE}`);
  }
  const payout = await deps.store.findPayout(caller.partnerId, userId, req.payoutId);
  if (!payout) {
    await appendAudit(deps, deps.db, ctx, { actor: caller.actor, action: "partner.payouts.read", subject: userId, reason: "not_found" });
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
}
