/** The treasury's shared caller checks and audit helpers, used by its handlers. */

import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { EdgeRejection } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { errorDetailOf, fail } from "../errors.js";
import { callFacts } from "../context.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { PartnerAccess, PartnerPrincipal } from "../partners/access.js";
import type { PartnerTokenVerifier } from "../partners/access-token.js";
import { TREASURY_SCOPE } from "../../lib/vocabulary.js";
import { reasonLabel } from "./wire.js";
import { EDGE_REJECTIONS } from "../partners/edge-rejections.js";

export const BATCH_ACTION = "treasury.batch.execute";
/** Audit actor of a request whose token proves no partner. */
const ANONYMOUS = "anonymous";

export interface AuditDeps {
  db: Db;
  audit: AuditStore;
  clock: () => Date;
}
/** What resolving a partner caller needs. */
export interface CallerDeps extends AuditDeps {
  /** The partner access checks: token, partner active, rate limit, user and consent. */
  access: PartnerAccess;
}
/** What auditing an edge-rejected request needs. */
export interface EdgeDeps extends AuditDeps {
  /** Names the partner of an edge-rejected request (signature and lifetime only). */
  tokens: PartnerTokenVerifier;
}

export async function appendAudit(
  deps: AuditDeps,
  conn: Knex | Knex.Transaction,
  ctx: HandlerContext,
  entry: { actor: string; action: string; subject: string; reason?: string },
) {
  try {
    await deps.audit.append(conn, { ...callFacts(ctx), outcome: entry.reason ? "failure" : "success", at: deps.clock(), ...entry });
  } catch (err) {
    fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
  }
}

/**
 * The partner-level access checks, then treasury:write in the token (an entitlement, never consent).
 * A missing or invalid bearer proves no partner and writes no audit row, so a flood cannot grow the
 * trail; unusable signing keys are audited under "anonymous".
 */
export async function treasuryCaller(
  deps: CallerDeps,
  ctx: HandlerContext,
  token: string,
  operation: string,
  action: string,
  subject: string,
): Promise<PartnerPrincipal> {
  let principal: PartnerPrincipal;
  try {
    principal = await deps.access.authorize(ctx, { token, operation });
  } catch (err) {
    const reason = errorDetailOf(err)?.reason;
    if (reason === Reason.AUTH_UNAVAILABLE) {
      await appendAudit(deps, deps.db, ctx, { actor: ANONYMOUS, action, subject, reason: reasonLabel(reason) });
    }
    throw err;
  }
  if (!principal.tokenScopes.includes(TREASURY_SCOPE)) {
    await appendAudit(deps, deps.db, ctx, { actor: principal.actor, action: `partner.${operation}`, subject: principal.clientId, reason: "grant_required" });
    fail(Reason.GRANT_REQUIRED, `the access token lacks ${TREASURY_SCOPE}`);
  }
  return principal;
}

/**
 * A batch request the gateway refused before reading it: audited under the partner the token
 * proves (none proved, no row), answering the gateway's error or audit_unavailable.
 */
export async function rejectAtEdge(deps: EdgeDeps, ctx: HandlerContext, token: string, rejection: EdgeRejection, subject: string): Promise<never> {
  let actor: string | undefined;
  if (token !== "" && EDGE_REJECTIONS[rejection]) {
    try {
      actor = `partner:${(await deps.tokens.verify(token)).clientId}`;
    } catch {
      // Unverifiable: the request proves no partner.
    }
  }
  return refuseAtEdge(deps, ctx, actor, rejection, subject);
}

/** Audits a gateway's edge refusal under `actor` (none when the request proves no partner) and raises it. */
export async function refuseAtEdge(
  deps: AuditDeps,
  ctx: HandlerContext,
  actor: string | undefined,
  rejection: EdgeRejection,
  subject: string,
  action = BATCH_ACTION,
): Promise<never> {
  const edge = EDGE_REJECTIONS[rejection];
  if (!edge) return fail(Reason.INVALID_REQUEST, "unknown edge_rejection");
  if (actor) await appendAudit(deps, deps.db, ctx, { actor, action, subject, reason: edge.label });
  return fail(edge.reason, edge.message);
}
