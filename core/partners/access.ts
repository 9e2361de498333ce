import { CONSENT_SCOPES, type ConsentScope } from "../../lib/vocabulary.js";
import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { leftWhileWaiting } from "../deadlines.js";
import { callFacts } from "../context.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { PartnerTokenVerifier } from "./access-token.js";
import type { KycRecord, ResourcesStore } from "./resources-store.js";
import { UUID } from "../../lib/uuid.js";
import { EdgeRejection } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { EDGE_REJECTIONS } from "./edge-rejections.js";

/** The resource-rate-limit window (a refusal says Retry-After: 60); the pruner drops ended ones. */
export const RATE_WINDOW_MS = 60_000;

export interface PartnerAccessDeps {
  db: Db;
  verifier: PartnerTokenVerifier;
  resources: ResourcesStore;
  audit: AuditStore;
  clock: () => Date;
  logger: Logger;
  /** Requests per minute per partner and operation; `default` for any operation not named. */
  rateLimits: Record<string, number> & { default: number };
  /** Test-only seam, the same one the audit store honours (AuditStoreOptions.appendFault). */
  auditFault?: () => Error | undefined;
}

export interface AccessRequest {
  token: string;
  /** The operation, for the rate-limit key and the audit action, e.g. "kyc.read". */
  operation: string;
  /** The user the resource belongs to; absent for partner-level operations. */
  userId?: string;
  /** The consent scope the resource needs (with userId). */
  scope?: ConsentScope;
  /**
   * Write the read's success audit row in the access statement itself (user reads):
   * when authorize() returns, the row is committed; when it cannot be written,
   * authorize() fails with audit_unavailable and no data may leave.
   */
  auditRead?: boolean;
  /** Also return the user's verification record (GET /kyc in one round trip). */
  withKyc?: boolean;
  /**
   * A gateway's refusal of the request's shape: after the partner-level checks (token, partner,
   * rate limit) it is refused invalid_request with this text, audited, and no user is looked at.
   */
  requestProblem?: string;
  /**
   * A gateway's refusal of the request's framing (body too large, invalid JSON, compressed):
   * checked and audited like `requestProblem`, with the refusal's code as the audit reason.
   */
  edgeRejection?: EdgeRejection;
}

export interface PartnerPrincipal {
  partnerId: string;
  clientId: string;
  tokenScopes: string[];
  /** Audit actor: `partner:<client_id>`. */
  actor: string;
  /** With `withKyc`: the record, or the not_started defaults' creation time. */
  kyc?: KycRecord;
  userCreatedAt?: Date;
}

/**
 * The partner resource access checks, in the order docs/reference/partner-api.md fixes, so
 * the refusal a caller sees never depends on timing. The success audit row is written before
 * any data leaves, by the access call itself (`auditRead`) or by the caller through audited().
 */
export function createPartnerAccess(deps: PartnerAccessDeps) {
  async function check(ctx: HandlerContext, req: AccessRequest, seen: Seen): Promise<PartnerPrincipal> {
    const token = await deps.verifier.verify(req.token);
    // A missing bearer is not a refusal a proved partner can have made: read as malformed.
    const edgeRule = req.edgeRejection === EdgeRejection.BEARER_MISSING ? undefined : EDGE_REJECTIONS[req.edgeRejection ?? EdgeRejection.UNSPECIFIED];
    const edge = req.edgeRejection ? (edgeRule ?? EDGE_REJECTIONS[EdgeRejection.MALFORMED]!) : undefined;
    // A framing refusal stands in for the shape, and so does an id that is none: no user is looked at.
    const badId = req.userId !== undefined && !UUID.test(req.userId) ? "user_id must be a UUID" : undefined;
    const problem = req.requestProblem || (edge ? edge.message : undefined) || badId;
    const userId = problem === undefined ? req.userId : undefined;
    seen.actor = `partner:${token.clientId}`;
    seen.subject = userId ?? "";
    const now = deps.clock();
    const windowStart = new Date(Math.floor(now.getTime() / RATE_WINDOW_MS) * RATE_WINDOW_MS);
    const limit = deps.rateLimits[req.operation] ?? deps.rateLimits.default;
    const auditRead = req.auditRead && problem === undefined;
    const auditFault = auditRead ? deps.auditFault?.() : undefined;
    const tokenHasScope = req.scope !== undefined && token.scopes.includes(req.scope);
    let row: Awaited<ReturnType<typeof deps.resources.readAccess>>;
    try {
      row = await deps.resources.readAccess({
        clientId: token.clientId,
        userId: userId ?? null,
        rateKey: `partner-resource:${token.clientId}:${req.operation}`,
        windowStart,
        limit,
        scope: req.scope,
        tokenHasScope,
        audit:
          auditRead && !auditFault ? { ...callFacts(ctx), actor: seen.actor, action: `partner.${req.operation}`, subject: userId ?? "", at: now } : undefined,
        withKyc: req.withKyc && problem === undefined,
        signal: ctx.signal,
      });
    } catch (err) {
      // A caller that left while its checks waited for a batch had nothing counted or written.
      if (leftWhileWaiting(ctx.signal, err)) throw err;
      // The statement carries the audit INSERT: if it fails, the read is withheld.
      if (auditRead) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
      throw err;
    }
    // A validly signed token for a partner that no longer exists verifies nothing.
    if (!row) fail(Reason.INVALID_TOKEN, "the access token is invalid");
    if (row.partnerStatus !== "active") fail(Reason.PARTNER_INACTIVE, "the partner is not active");
    if (row.rateCount > limit) fail(Reason.RATE_LIMITED, "too many requests for this operation", { retryAfterSeconds: 60 });
    if (edge) {
      seen.reason = edge.label;
      fail(edge.reason, edge.message);
    }
    if (problem !== undefined) fail(Reason.INVALID_REQUEST, problem);
    const principal: PartnerPrincipal = { partnerId: row.partnerId, clientId: token.clientId, tokenScopes: token.scopes, actor: seen.actor };
    if (userId === undefined) return principal;
    // Ids that belong only to another partner look exactly like unknown ids.
    if (!row.userExists || (!row.hasReceipt && !row.hasConsent)) fail(Reason.USER_NOT_FOUND, "no such user for this partner");
    if (row.userStatus !== "active") fail(Reason.USER_INACTIVE, "the user's account is not active");
    const scope = req.scope;
    const isConsentScope = scope !== undefined && (CONSENT_SCOPES as readonly string[]).includes(scope);
    if (!isConsentScope || !tokenHasScope || !row.consentCovers) {
      fail(Reason.GRANT_REQUIRED, scope ? `this resource needs ${scope} in both the token and the user's consent` : "grant required");
    }
    if (auditRead) {
      if (auditFault) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, auditFault);
      // Every check above passed, so the statement's guarded INSERT must have run.
      if (!row.audited) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted");
    }
    return { ...principal, kyc: row.kyc, userCreatedAt: row.userCreatedAt ?? undefined };
  }

  return {
    /**
     * Runs the checks; a refusal is audited and rethrown. A refusal whose audit row cannot
     * be written is not answered as that refusal: like a withheld read it fails closed
     * with audit_unavailable (503, safe to retry), so no answer leaves without its record.
     */
    async authorize(ctx: HandlerContext, req: AccessRequest): Promise<PartnerPrincipal> {
      const seen: Seen = { actor: "partner", subject: "" };
      try {
        return await check(ctx, req, seen);
      } catch (err) {
        const detail = errorDetailOf(err);
        if (detail && detail.reason !== Reason.INVALID_TOKEN && detail.reason !== Reason.AUTH_UNAVAILABLE) {
          await deps.audit
            .append(deps.db, {
              ...callFacts(ctx),
              actor: seen.actor,
              action: `partner.${req.operation}`,
              outcome: "failure",
              reason: seen.reason ?? (Reason[detail.reason] ?? "unspecified").toLowerCase(),
              subject: seen.subject,
              at: deps.clock(),
            })
            .catch((auditErr: unknown) => fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, auditErr));
        }
        throw err;
      }
    },

    /**
     * Runs the rest of a request whose access checks passed; a refusal there (paging input, the
     * e-mail, a provider conflict) is audited as a failure like the checks' own, then rethrown.
     */
    async refusalsAudited<T>(ctx: HandlerContext, principal: PartnerPrincipal, operation: string, subject: string, work: () => Promise<T>): Promise<T> {
      try {
        return await work();
      } catch (err) {
        // A caller who left while it waited (for a connection, say) was refused nothing: no record.
        if (leftWhileWaiting(ctx.signal, err)) throw err;
        const reason = errorDetailOf(err)?.reason;
        // Without a reason (a bug), or when the database is the problem, there is nothing to record.
        if (reason === undefined || reason === Reason.AUDIT_UNAVAILABLE || reason === Reason.UNAVAILABLE) throw err;
        await deps.audit
          .append(deps.db, {
            ...callFacts(ctx),
            actor: principal.actor,
            action: `partner.${operation}`,
            outcome: "failure",
            reason: (Reason[reason] ?? "unspecified").toLowerCase(),
            subject,
            at: deps.clock(),
          })
          .catch((auditErr: unknown) => fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, auditErr));
        throw err;
      }
    },

    /**
     * Writes the success audit row of a read before its data leaves; when it cannot be
     * written the read is withheld (audit_unavailable).
     */
    async audited(ctx: HandlerContext, principal: PartnerPrincipal, operation: string, subject: string): Promise<void> {
      try {
        await deps.audit.append(deps.db, {
          ...callFacts(ctx),
          actor: principal.actor,
          action: `partner.${operation}`,
          outcome: "success",
          subject,
          at: deps.clock(),
        });
      } catch (err) {
        fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
      }
    },
  };
}

export type PartnerAccess = ReturnType<typeof createPartnerAccess>;

/** What a refusal's audit record names: the proved partner, and the user only once the id was taken. */
type Seen = { actor: string; subject: string; reason?: string };
