import { randomUUID } from "node:crypto";
import { canonicalEmail, storedEmailSpellings } from "../../lib/email.js";
import { lengthBetween, nameProblem } from "../../lib/text.js";
import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  type CreatePartnerRequest,
  type CreatePartnerResponseSchema,
  type CreateUserRequest,
  type CreateUserResponseSchema,
  type GetPartnerRequest,
  type GetPartnerResponseSchema,
  type GetUserByEmailRequest,
  type GetUserByEmailResponseSchema,
  type ListPartnersRequest,
  type ListPartnersResponseSchema,
  type ListUsersRequest,
  type ListUsersResponseSchema,
  type Partner,
  type PartnerSchema,
  PartnerStatus,
  type RotateSecretRequest,
  type RotateSecretResponseSchema,
  type SetEntitlementsRequest,
  type SetEntitlementsResponseSchema,
  type SetPartnerStatusRequest,
  type SetPartnerStatusResponseSchema,
} from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import { UUID } from "../../lib/uuid.js";
import { adminChange, type AdminChangeDeps } from "./resources-changes.js";
import { checkHttpsUrl } from "./resources-wire.js";
import type { Db } from "../db/knex.js";
import type { CursorCodec } from "../paging.js";
import type { PartnersStore, PartnerRecord, PartnerStatusName } from "./store.js";
import type { UserListing, UsersStore } from "../identity/users-store.js";
import { generateClientId, generateClientSecret, isValidSlug, slugFromName } from "./credentials.js";
import type { SecretHasher } from "../secrets/hasher.js";
import { CONSENT_SCOPES, PARTNER_SCOPES } from "../../lib/vocabulary.js";
import { quotedExcerpt } from "../../lib/text.js";
import { ensureUserAccount } from "../budgets/user-accounts.js";
import { generateWebhookSecret, type SecretBox } from "./webhooks/signing.js";

/** An operator change and its audit row, in one transaction. */
export interface CreatePartnerDeps extends AdminChangeDeps {
  store: Pick<PartnersStore, "insert">;
  secrets: Pick<SecretHasher, "hash">;
  /** Seals a new partner's webhook signing secret, as SetWebhook does. */
  webhookBox: Pick<SecretBox, "seal">;
}

export interface PartnerUpdateDeps extends AdminChangeDeps {
  store: Pick<PartnersStore, "lockByClientId" | "update">;
}

export interface RotateSecretDeps extends PartnerUpdateDeps {
  secrets: Pick<SecretHasher, "hash">;
}

export interface CreateUserDeps extends AdminChangeDeps {
  users: Pick<UsersStore, "ensureUser">;
}

export interface PartnerReadDeps {
  store: Pick<PartnersStore, "list" | "findByClientId">;
}

export interface UserReadDeps {
  db: Db;
  users: Pick<UsersStore, "list" | "findByStoredEmail">;
}

/** The operator lists sign their cursors. */
export interface ListDeps {
  cursors: CursorCodec;
}

const statusName = {
  [PartnerStatus.UNSPECIFIED]: undefined,
  [PartnerStatus.ACTIVE]: "active",
  [PartnerStatus.PENDING]: "pending",
  [PartnerStatus.SUSPENDED]: "suspended",
} satisfies Record<PartnerStatus, PartnerStatusName | undefined>;

const statusEnum = { active: PartnerStatus.ACTIVE, pending: PartnerStatus.PENDING, suspended: PartnerStatus.SUSPENDED } satisfies Record<
  PartnerStatusName,
  PartnerStatus
>;

/** PartnersService.CreatePartner: registers a partner and returns its client secret, once. */
export async function createPartner(
  deps: CreatePartnerDeps,
  req: CreatePartnerRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof CreatePartnerResponseSchema>> {
  const nameWrong = nameProblem(req.name);
  if (nameWrong) fail(Reason.INVALID_REQUEST, `name ${nameWrong}`);
  const name = req.name.trim();
  if (!lengthBetween(name, 1, 200)) fail(Reason.INVALID_REQUEST, "name must be 1 to 200 characters");
  const slug = req.slug ? req.slug : slugFromName(name);
  if (!req.slug && !slug) {
    fail(Reason.INVALID_REQUEST, "the name has no Latin letters or digits to make a slug of: give a slug of 1-32 lower-case letters, digits or inner '-'");
  }
  if (!slug || !isValidSlug(slug)) fail(Reason.INVALID_REQUEST, "slug must be 1-32 lower-case letters, digits or inner '-'");
  const entitlements = req.entitlements ? [...new Set(req.entitlements.scopes)] : [...CONSENT_SCOPES];
  checkEntitlements(entitlements);
  const status = req.status === PartnerStatus.UNSPECIFIED ? "active" : statusName[req.status];
  if (status !== "active" && status !== "pending") fail(Reason.INVALID_REQUEST, "a new partner is active or pending");
  const webhookUrl = req.webhookUrl ? checkHttpsUrl(req.webhookUrl, "webhook_url") : null;
  // A URL without a secret would never be sent to: the secret comes with it, shown once.
  const webhookSecret = webhookUrl ? generateWebhookSecret() : "";
  const webhookSecretEnc = webhookUrl ? deps.webhookBox.seal(webhookSecret) : null;

  const clientSecret = generateClientSecret();
  const secretHash = await deps.secrets.hash(clientSecret, undefined, ctx.signal);
  const now = deps.clock();
  for (let attempt = 0; attempt < 5; attempt++) {
    const record: PartnerRecord = {
      id: randomUUID(),
      name,
      slug,
      clientId: generateClientId(slug),
      secretHash,
      status,
      entitlements,
      webhookUrl,
      webhookGoneAt: null,
      createdAt: now,
      updatedAt: now,
    };
    // A client_id collision (8 random hex chars) is retried with a fresh suffix.
    const inserted = await adminChange(
      deps,
      ctx,
      "creates",
      "partner.create",
      record.clientId,
      async (trx) => (await deps.store.insert(trx, record, webhookSecretEnc)).inserted,
    );
    if (inserted) return { partner: toProto(record), clientSecret, webhookSecret };
  }
  return fail(Reason.INTERNAL, "could not allocate a client id");
}

/** PartnersService.RotateSecret: a new client secret for the partner. */
export async function rotateSecret(
  deps: RotateSecretDeps,
  req: RotateSecretRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof RotateSecretResponseSchema>> {
  const clientSecret = generateClientSecret();
  const secretHash = await deps.secrets.hash(clientSecret, undefined, ctx.signal);
  // Replaces the hash at once; client_id and status unchanged.
  await adminChange(deps, ctx, "may-end", "partner.rotate_secret", req.clientId, async (trx) => {
    const locked = await deps.store.lockByClientId(trx, req.clientId);
    if (!locked) fail(Reason.NOT_FOUND, "no such partner");
    return deps.store.update(trx, req.clientId, { secretHash }, deps.clock());
  });
  return { clientId: req.clientId, clientSecret };
}

/** PartnersService.SetPartnerStatus: activates, suspends or parks a partner. */
export async function setPartnerStatus(
  deps: PartnerUpdateDeps,
  req: SetPartnerStatusRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetPartnerStatusResponseSchema>> {
  const status = statusName[req.status];
  if (!status) fail(Reason.INVALID_REQUEST, "status is required");
  // Only an activation grants: a suspension or parking goes on whether or not its caller still waits.
  const kind = status === "active" ? "creates" : "may-end";
  const partner = await adminChange(deps, ctx, kind, `partner.set_status.${status}`, req.clientId, async (trx) => {
    const locked = await deps.store.lockByClientId(trx, req.clientId);
    if (!locked) fail(Reason.NOT_FOUND, "no such partner");
    return (await deps.store.update(trx, req.clientId, { status }, deps.clock()))!;
  });
  return { partner: toProto(partner) };
}

/** PartnersService.SetEntitlements: replaces the scopes a partner may request. */
export async function setEntitlements(
  deps: PartnerUpdateDeps,
  req: SetEntitlementsRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetEntitlementsResponseSchema>> {
  const entitlements = [...new Set(req.entitlements)];
  checkEntitlements(entitlements);
  const partner = await adminChange(deps, ctx, "may-end", "partner.set_entitlements", req.clientId, async (trx) => {
    const locked = await deps.store.lockByClientId(trx, req.clientId);
    if (!locked) fail(Reason.NOT_FOUND, "no such partner");
    return (await deps.store.update(trx, req.clientId, { entitlements }, deps.clock()))!;
  });
  return { partner: toProto(partner) };
}

/** PartnersService.CreateUser: the user of an e-mail address, with a vault, created if new. */
export async function createUser(
  deps: CreateUserDeps,
  req: CreateUserRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof CreateUserResponseSchema>> {
  const email = canonicalEmail(req.email);
  if (!email) fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
  const ids = await callerTransaction(deps.db, ctx.signal, "before the user was created", async (trx) => {
    const result = await ensureUserAccount(trx, deps.users, email, deps.clock());
    await deps.audit.append(trx, {
      ...callFacts(ctx),
      actor: "admin",
      action: "user.create",
      outcome: "success",
      subject: result.userId,
      at: deps.clock(),
    });
    return result;
  });
  return ids;
}

/** PartnersService.ListPartners: one page of partners, by id. */
export async function listPartners(deps: PartnerReadDeps & ListDeps, req: ListPartnersRequest): Promise<MessageInitShape<typeof ListPartnersResponseSchema>> {
  const limit = pageLimit(req.limit);
  const rows = await deps.store.list(limit + 1, afterIdOf(deps.cursors, "partners", req.cursor));
  const page = rows.slice(0, limit);
  return { partners: page.map(toProto), nextCursor: rows.length > limit ? cursorOf(deps.cursors, "partners", page[page.length - 1]!.id) : "" };
}

/** PartnersService.ListUsers: one page of users, by id. */
export async function listUsers(deps: UserReadDeps & ListDeps, req: ListUsersRequest): Promise<MessageInitShape<typeof ListUsersResponseSchema>> {
  const limit = pageLimit(req.limit);
  const rows = await deps.users.list(deps.db, limit + 1, afterIdOf(deps.cursors, "users", req.cursor));
  const page = rows.slice(0, limit);
  return { users: page.map(userToProto), nextCursor: rows.length > limit ? cursorOf(deps.cursors, "users", page[page.length - 1]!.id) : "" };
}

/**
 * PartnersService.GetUserByEmail: the user of an e-mail address, also one stored before the
 * current rule and breaking it, so that the operator can find that user to fix the address.
 */
export async function getUserByEmail(deps: UserReadDeps, req: GetUserByEmailRequest): Promise<MessageInitShape<typeof GetUserByEmailResponseSchema>> {
  const spellings = storedEmailSpellings(req.email);
  if (spellings.length === 0) fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
  const user = await deps.users.findByStoredEmail(deps.db, spellings);
  if (!user) fail(Reason.NOT_FOUND, "no such user");
  return { user: userToProto(user) };
}

/** PartnersService.GetPartner: the partner of a client id. */
export async function getPartner(deps: PartnerReadDeps, req: GetPartnerRequest): Promise<MessageInitShape<typeof GetPartnerResponseSchema>> {
  const partner = await deps.store.findByClientId(req.clientId);
  if (!partner) fail(Reason.NOT_FOUND, "no such partner");
  return { partner: toProto(partner) };
}

const DEFAULT_PAGE = 50;
const MAX_PAGE = 200;

function pageLimit(limit: number): number {
  return limit === 0 ? DEFAULT_PAGE : Math.min(limit, MAX_PAGE);
}

/** A list cursor names the last row of the previous page, signed and bound to its list. */
function cursorOf(cursors: CursorCodec, list: "partners" | "users", id: string): string {
  return cursors.encode({ l: list, i: id });
}

function afterIdOf(cursors: CursorCodec, list: "partners" | "users", cursor: string): string | undefined {
  if (!cursor) return undefined;
  const c = cursors.decode(cursor);
  if (c?.l !== list || typeof c.i !== "string" || !UUID.test(c.i)) fail(Reason.INVALID_CURSOR, "cursor is malformed or not a next_cursor of this list");
  return c.i;
}

function userToProto(u: UserListing) {
  return { userId: u.id, email: u.email, status: u.status, vaultId: u.vaultId ?? "", createdAt: u.createdAt.toISOString() };
}

function checkEntitlements(entitlements: string[]): void {
  const unknown = entitlements.filter((s) => !PARTNER_SCOPES.includes(s));
  if (unknown.length === 0) return;
  // Each named briefly, so the allowed ones still show after a long unknown one.
  const named = unknown.slice(0, 5).map((s) => {
    const cut = quotedExcerpt(s, 40);
    return cut.length < s.length ? `${cut}…` : cut;
  });
  fail(Reason.INVALID_REQUEST, `unknown entitlements: ${named.join(", ")}${unknown.length > 5 ? ", …" : ""}; allowed: ${PARTNER_SCOPES.join(", ")}`);
}

function toProto(p: PartnerRecord): MessageInitShape<typeof PartnerSchema> & Partial<Partner> {
  return {
    partnerId: p.id,
    name: p.name,
    slug: p.slug,
    clientId: p.clientId,
    status: statusEnum[p.status],
    entitlements: p.entitlements,
    webhookUrl: p.webhookUrl ?? "",
    webhookGoneAt: p.webhookGoneAt ? timestampFromDate(p.webhookGoneAt) : undefined,
  };
}
