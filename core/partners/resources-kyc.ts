/** PartnerResourcesService: a user's identity verification (KYC) record and provider links. */

import type { HandlerContext } from "@connectrpc/connect";
import { KYC_STATUSES } from "../../lib/vocabulary.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  CreateKycLinkRequest,
  CreateKycLinkResponseSchema,
  GetKycStatusRequest,
  GetKycStatusResponseSchema,
  SetKycStatusRequest,
  SetKycStatusResponseSchema,
} from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import type { UsersStore } from "../identity/users-store.js";
import type { PartnerAccess } from "./access.js";
import type { KycRecord, ResourcesStore } from "./resources-store.js";
import type { KycProvider } from "./kyc-providers.js";
import { checkHttpsUrl, kycJson, kycOut } from "./resources-wire.js";
import { adminChange, emit, lockUser, type AdminChangeDeps, type EmitDeps, type LockUserDeps } from "./resources-changes.js";

/** What PartnerResourcesService.GetKycStatus needs. */
export interface GetKycStatusDeps {
  access: Pick<PartnerAccess, "authorize">;
  clock: () => Date;
}

/** What PartnerResourcesService.CreateKycLink needs. */
export interface CreateKycLinkDeps {
  db: Db;
  access: Pick<PartnerAccess, "authorize" | "audited" | "refusalsAudited">;
  users: Pick<UsersStore, "findById">;
  resources: Pick<ResourcesStore, "getKyc">;
  /** The configured providers, by name. */
  providers: ReadonlyMap<string, KycProvider>;
  /** The provider used when a link request names none. */
  defaultKycProvider: string;
  clock: () => Date;
}

/** What PartnerResourcesService.SetKycStatus needs. */
export interface SetKycStatusDeps extends AdminChangeDeps, LockUserDeps, EmitDeps {
  resources: Pick<ResourcesStore, "getKyc" | "upsertKyc" | "partnersConsenting">;
}

/** PartnerResourcesService.GetKycStatus: a user's verification record, not_started when there is none. */
export async function getKycStatus(
  deps: GetKycStatusDeps,
  req: GetKycStatusRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof GetKycStatusResponseSchema>> {
  // One round trip: checks, audit row and the record (the audit row is committed
  // before this returns, so it precedes the data leaving).
  const principal = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "kyc.read",
    userId: req.userId,
    scope: "kyc:read",
    auditRead: true,
    withKyc: true,
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  return kycOut(principal.kyc ?? { userId: req.userId, status: "not_started", provider: null, updatedAt: principal.userCreatedAt ?? deps.clock() });
}

/** PartnerResourcesService.CreateKycLink: a provider's verification link for a user. */
export async function createKycLink(
  deps: CreateKycLinkDeps,
  req: CreateKycLinkRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof CreateKycLinkResponseSchema>> {
  const principal = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "kyc.link",
    userId: req.userId,
    scope: "kyc:read",
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  const name = req.provider || deps.defaultKycProvider;
  const link = await deps.access.refusalsAudited(ctx, principal, "kyc.link", req.userId, async () => {
    const provider = deps.providers.get(name);
    if (!provider) fail(Reason.INVALID_REQUEST, `unknown provider; available: ${[...deps.providers.keys()].join(", ")}`);
    if (req.redirectUri) checkHttpsUrl(req.redirectUri, "redirect_uri");
    const kyc = await kycOf(deps, req.userId);
    if (kyc.status === "approved" && kyc.provider && kyc.provider !== name) {
      fail(Reason.KYC_PROVIDER_CONFLICT, "the user is already verified with another provider");
    }
    try {
      const made = await provider.createLink({ userId: req.userId, redirectUri: req.redirectUri || undefined, now: deps.clock() });
      // Only handed to the partner, never stored: it carries the escaped redirect_uri, up to three times its length.
      checkHttpsUrl(made.url, "provider url", Number.POSITIVE_INFINITY);
      return made;
    } catch (err) {
      // Whatever the provider did (refused, threw, or handed back an unusable URL), the
      // client sees one fixed 503; the cause goes to the logs.
      return fail(Reason.PROVIDER_UNAVAILABLE, "the verification provider is unavailable", {}, err);
    }
  });
  await deps.access.audited(ctx, principal, "kyc.link", req.userId);
  return { url: link.url, provider: name, expiresAt: link.expiresAt.toISOString() };
}

/** PartnerResourcesService.SetKycStatus: the operator sets a user's record; a change is an event. */
export async function setKycStatus(
  deps: SetKycStatusDeps,
  req: SetKycStatusRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetKycStatusResponseSchema>> {
  if (!(KYC_STATUSES as readonly string[]).includes(req.status)) fail(Reason.INVALID_REQUEST, `status must be one of ${KYC_STATUSES.join(", ")}`);
  if (req.provider && !/^[a-z0-9][a-z0-9_-]{0,63}$/.test(req.provider))
    fail(Reason.INVALID_REQUEST, "provider must be 1-64 lower-case letters, digits, '-' or '_'");
  const kyc = await adminChange(deps, ctx, "may-end", "user.set_kyc", req.userId, async (trx) => {
    // The id as stored (lower case), whatever case the operator typed: partners match events on it.
    const user = await lockUser(deps, trx, req.userId);
    const userId = user.id;
    const before = await deps.resources.getKyc(trx, userId);
    const next: KycRecord = { userId, status: req.status as KycRecord["status"], provider: req.provider || null, updatedAt: deps.clock() };
    await deps.resources.upsertKyc(trx, next);
    if (!before || before.status !== next.status || before.provider !== next.provider) {
      await emit(deps, trx, user, "kyc:read", "kyc.status_changed", kycJson(next));
    }
    return next;
  });
  return { kyc: kycOut(kyc) };
}

async function kycOf(deps: Pick<CreateKycLinkDeps, "db" | "users" | "resources" | "clock">, userId: string): Promise<KycRecord> {
  const kyc = await deps.resources.getKyc(deps.db, userId);
  if (kyc) return kyc;
  const user = await deps.users.findById(deps.db, userId);
  return { userId, status: "not_started", provider: null, updatedAt: user?.createdAt ?? deps.clock() };
}
