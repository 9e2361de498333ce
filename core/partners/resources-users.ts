/** PartnerResourcesService: the access check, users and their consents to partners. */

import type { HandlerContext } from "@connectrpc/connect";
import { USER_STATUSES } from "../../lib/vocabulary.js";
import { canonicalEmail } from "../../lib/email.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  AuthorizePartnerRequest,
  AuthorizePartnerResponseSchema,
  GrantConsentRequest,
  GrantConsentResponseSchema,
  PreCreateUserRequest,
  PreCreateUserResponseSchema,
  RevokeConsentRequest,
  RevokeConsentResponseSchema,
  SetUserStatusRequest,
  SetUserStatusResponseSchema,
} from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { UsersStore } from "../identity/users-store.js";
import { CONSENT_SCOPES, PARTNER_SCOPES, type ConsentScope } from "../../lib/vocabulary.js";
import type { PartnerAccess } from "./access.js";
import type { PartnersStore } from "./store.js";
import type { ResourcesStore } from "./resources-store.js";
import { checkConsentScopes } from "./resources-wire.js";
import { adminChange, lockUser, type AdminChangeDeps, type LockUserDeps } from "./resources-changes.js";
import { ensureUserAccount } from "../budgets/user-accounts.js";
import { endSignIns, type EndSignInsDeps } from "../identity/account-changes.js";
import { CONSENT_EVENT_TYPES, type OutboxStore } from "./webhooks/outbox-store.js";

/** What PartnerResourcesService.AuthorizePartner needs. */
export interface AuthorizePartnerDeps {
  access: Pick<PartnerAccess, "authorize">;
}

/** What PartnerResourcesService.PreCreateUser needs. */
export interface PreCreateUserDeps {
  db: Db;
  access: Pick<PartnerAccess, "authorize" | "refusalsAudited">;
  users: Pick<UsersStore, "ensureUser">;
  partners: Pick<PartnersStore, "holdStatus">;
  resources: Pick<ResourcesStore, "addReceipt">;
  audit: Pick<AuditStore, "append">;
  clock: () => Date;
}

/** What PartnerResourcesService.SetUserStatus needs. */
export interface SetUserStatusDeps extends AdminChangeDeps, EndSignInsDeps {
  users: Pick<UsersStore, "lockUser" | "setUserStatus" | "findById">;
  outbox: Pick<OutboxStore, "dropUserEvents">;
}

/** What PartnerResourcesService.GrantConsent needs. */
export interface ConsentDeps extends AdminChangeDeps, LockUserDeps {
  partners: Pick<PartnersStore, "findByClientId">;
  resources: Pick<ResourcesStore, "getConsent" | "putConsent">;
}

/** What PartnerResourcesService.RevokeConsent needs. */
export interface RevokeConsentDeps extends ConsentDeps {
  outbox: Pick<OutboxStore, "withdrawUserEvents">;
}

/** PartnerResourcesService.AuthorizePartner: the partner access checks alone, for a gateway. */
export async function authorizePartner(
  deps: AuthorizePartnerDeps,
  req: AuthorizePartnerRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof AuthorizePartnerResponseSchema>> {
  // The scope names a rate-limit key and audit action only when it is one of ours: no caller mints either.
  const named = !req.scope ? "authorize" : PARTNER_SCOPES.includes(req.scope) ? `authorize.${req.scope}` : "authorize.unknown_scope";
  const principal = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: named,
    userId: req.userId || undefined,
    // From the wire: a scope no consent can hold is refused grant_required, like a missing consent.
    scope: (req.scope || undefined) as ConsentScope | undefined,
  });
  return { partnerId: principal.partnerId, clientId: principal.clientId, tokenScopes: principal.tokenScopes };
}

/** PartnerResourcesService.PreCreateUser: the user of an e-mail address, known to the calling partner. */
export async function preCreateUser(
  deps: PreCreateUserDeps,
  req: PreCreateUserRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof PreCreateUserResponseSchema>> {
  const principal = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "users.create",
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  // One transaction: user, receipt and audit row commit together or not at all, so a
  // retry after audit_unavailable answers exactly as the first call would have.
  return deps.access.refusalsAudited(ctx, principal, "users.create", "", async () => {
    // A program sends the address it means: spaces around it are a bug the published pattern refuses too.
    if (req.email.trim() !== req.email) fail(Reason.INVALID_REQUEST, "email must not have spaces around it");
    const email = canonicalEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
    return callerTransaction(deps.db, ctx.signal, "before the user was created", async (trx) => {
      // A suspension that committed after the access check is seen here, or waits for this commit.
      if ((await deps.partners.holdStatus(trx, principal.partnerId)) !== "active") fail(Reason.PARTNER_INACTIVE, "the partner is not active");
      const now = deps.clock();
      const user = await ensureUserAccount(trx, deps.users, email, now);
      const receipt = await deps.resources.addReceipt(trx, principal.partnerId, user.userId, now);
      try {
        await deps.audit.append(trx, {
          ...callFacts(ctx),
          actor: principal.actor,
          action: "partner.users.create",
          outcome: "success",
          subject: user.userId,
          at: now,
        });
      } catch (err) {
        fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
      }
      // `created` is about this partner's receipt, never whether the user existed.
      return { userId: user.userId, created: receipt.inserted };
    });
  });
}

/** PartnerResourcesService.SetUserStatus: activates or deactivates a user. */
export async function setUserStatus(
  deps: SetUserStatusDeps,
  req: SetUserStatusRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetUserStatusResponseSchema>> {
  if (!(USER_STATUSES as readonly string[]).includes(req.status)) fail(Reason.INVALID_REQUEST, `status must be one of ${USER_STATUSES.join(", ")}`);
  // Only an activation grants: a deactivation goes on whether or not its caller still waits.
  await adminChange(deps, ctx, req.status === "active" ? "creates" : "may-end", `user.set_status.${req.status}`, req.userId, async (trx) => {
    const { id } = await lockUser(deps, trx, req.userId);
    await deps.users.setUserStatus(trx, id, req.status as "active" | "inactive");
    if (req.status !== "inactive") return;
    // A deactivated user's data stops flowing: what waits or sits in a feed goes (emitters wait on the row lock).
    await deps.outbox.dropUserEvents(trx, id);
    // Ended, not merely refused while inactive: a reactivation must not bring back what was open before.
    const { email } = (await deps.users.findById(trx, id))!;
    await endSignIns(deps, trx, { id, email }, deps.clock());
  });
  return { userId: req.userId, status: req.status };
}

/** PartnerResourcesService.GrantConsent: adds scopes (all consent scopes when none named) to a user's consent. */
export async function grantConsent(
  deps: ConsentDeps,
  req: GrantConsentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof GrantConsentResponseSchema>> {
  const wanted = req.scopes ? [...new Set(req.scopes.scopes)] : [...CONSENT_SCOPES];
  checkConsentScopes(wanted);
  const scopes = await adminChange(deps, ctx, "creates", "consent.grant", `${req.clientId}:${req.userId}`, async (trx) => {
    const partner = await deps.partners.findByClientId(req.clientId, trx);
    if (!partner) fail(Reason.NOT_FOUND, "no such partner");
    await lockUser(deps, trx, req.userId);
    const current = (await deps.resources.getConsent(trx, partner.id, req.userId)) ?? [];
    const next = CONSENT_SCOPES.filter((s) => current.includes(s) || wanted.includes(s));
    await deps.resources.putConsent(trx, partner.id, req.userId, next, deps.clock());
    return next;
  });
  return { scopes };
}

/** PartnerResourcesService.RevokeConsent: removes scopes (all when none named) from a user's consent. */
export async function revokeConsent(
  deps: RevokeConsentDeps,
  req: RevokeConsentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof RevokeConsentResponseSchema>> {
  const removed = req.scopes ? [...new Set(req.scopes.scopes)] : [...CONSENT_SCOPES];
  checkConsentScopes(removed);
  const scopes = await adminChange(deps, ctx, "may-end", "consent.revoke", `${req.clientId}:${req.userId}`, async (trx) => {
    const partner = await deps.partners.findByClientId(req.clientId, trx);
    if (!partner) fail(Reason.NOT_FOUND, "no such partner");
    await lockUser(deps, trx, req.userId);
    const current = await deps.resources.getConsent(trx, partner.id, req.userId);
    if (current === undefined) fail(Reason.NOT_FOUND, "no consent to revoke");
    // The row stays (empty = revoked): the user remains known to the partner (grant_required, not user_not_found).
    const next = current.filter((s) => !removed.includes(s));
    await deps.resources.putConsent(trx, partner.id, req.userId, next, deps.clock());
    // What the partner may no longer read is no longer sent to it either (the user row lock orders this against emitters).
    const withdrawn = CONSENT_SCOPES.filter((s) => !next.includes(s)).flatMap((s) => CONSENT_EVENT_TYPES[s] ?? []);
    await deps.outbox.withdrawUserEvents(trx, partner.id, req.userId, withdrawn);
    return next;
  });
  return { scopes };
}
