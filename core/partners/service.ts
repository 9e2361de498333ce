import { randomUUID } from "node:crypto";
import type { ServiceImpl, HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { type PartnersService, PartnerStatus, type Partner } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { PartnerSchema } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { fail, errorDetailOf } from "../errors.js";
import { callFacts, kClientAddress } from "../context.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { Keyring } from "../keys/keyring.js";
import type { PartnersStore, PartnerRecord, PartnerStatusName } from "./store.js";
import { normaliseEmail, type UserListing, type UsersStore } from "../identity/users-store.js";
import { constantTimeEqual } from "../../lib/crypto.js";
import { generateClientId, generateClientSecret, isValidSlug, slugFromName } from "./credentials.js";
import type { SecretHasher } from "../secrets/hasher.js";
import { createClientSecretChecker } from "../secrets/client-secret-checker.js";
import { createAddressSampler } from "../secrets/address-sampler.js";
import { createTimingMirror } from "../secrets/timing-mirror.js";
import { CONSENT_SCOPES, PARTNER_SCOPES, resolveTokenScopes } from "./scopes.js";
import { PARTNER_TOKEN_HEADER, PARTNER_TOKEN_TTL_SECONDS, partnerTokenClaims } from "./token-claims.js";

export interface PartnersServiceDeps {
  db: Db;
  store: PartnersStore;
  users: UsersStore;
  audit: AuditStore;
  rateLimits: RateLimitStore;
  secrets: SecretHasher;
  keyring: Keyring;
  clock: () => Date;
  logger: Logger;
  issuer: string;
  audience: string;
  /** 30 issuances per minute per client, failures included. */
  issuanceLimitPerMinute: number;
  /** Unregistered client ids counted one by one (default 100,000). */
  unknownClientIds?: number;
}

const ISSUE_ACTION = "partner.token.issue";
const MAX_CLIENT_ID = 128;
const MAX_SECRET = 256;
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

export function createPartnersService(deps: PartnersServiceDeps): ServiceImpl<typeof PartnersService> {
  const { db, store, audit } = deps;

  /** Records a failed attempt outside the rolled-back transaction; if even that fails, withhold (503). */
  async function auditFailure(ctx: HandlerContext, actor: string, action: string, reason: string, subject = "") {
    try {
      await audit.append(db, {
        ...callFacts(ctx),
        actor,
        action,
        outcome: "failure",
        reason,
        subject,
        at: deps.clock(),
      });
    } catch (err) {
      fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
    }
  }

  /** Runs an admin mutation in one transaction with its audit row. */
  async function adminChange<T>(ctx: HandlerContext, action: string, subject: string, work: (trx: import("knex").Knex.Transaction) => Promise<T>) {
    return db.transaction(async (trx) => {
      const result = await work(trx);
      await audit.append(trx, { ...callFacts(ctx), actor: "admin", action, outcome: "success", subject, at: deps.clock() });
      return result;
    });
  }

  // Per client: every issuance attempt counts (30 a minute), failures included, taken
  // before any derivation; the derivation itself is scheduled fairly (core/secrets).
  const secretCheck = createClientSecretChecker({
    hasher: deps.secrets,
    rateLimits: deps.rateLimits,
    clock: deps.clock,
    logger: deps.logger,
    budget: { key: "partner-token:", limit: deps.issuanceLimitPerMinute, counts: "attempts" },
    unknownClientIds: deps.unknownClientIds,
  });

  // A client id nobody registered is no client's attempt: its failures are audited once a
  // minute per address, with how many went unrecorded before, and the rest wait as long as
  // a failure's audit write takes, so they answer in the same time as a known client's.
  const unknownFailures = createAddressSampler(60_000);
  const failureWrites = createTimingMirror();

  /** Audits a failed issuance: always for a registered client, sampled per address for an unknown one. */
  async function auditIssueFailure(ctx: HandlerContext, actor: string, known: boolean, reason: string) {
    if (known) return failureWrites.time(() => auditFailure(ctx, actor, ISSUE_ACTION, reason));
    const sampled = unknownFailures.take(ctx.values.get(kClientAddress), deps.clock().getTime());
    if (!sampled) return failureWrites.wait();
    const subject = sampled.unrecorded > 0 ? `unrecorded_before:${sampled.unrecorded}` : "";
    await failureWrites.time(() => auditFailure(ctx, actor, ISSUE_ACTION, reason, subject));
  }

  /** Audits a refusal with a domain reason (rate limited, shed) and passes it on. */
  async function auditRefusal<T>(ctx: HandlerContext, actor: string, known: boolean, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      await auditIssueFailure(ctx, actor, known, reasonLabel(errorDetailOf(err)?.reason ?? Reason.INTERNAL));
      throw err;
    }
  }

  return {
    async issueToken(req, ctx) {
      const clientId = req.clientId;
      const actor = `partner:${clientId.slice(0, MAX_CLIENT_ID)}`;
      if (clientId.length === 0 || clientId.length > MAX_CLIENT_ID || req.clientSecret.length > MAX_SECRET) {
        // An id of no registered client's shape is audited as an unknown one.
        const known = clientId.length > 0 && clientId.length <= MAX_CLIENT_ID;
        await auditIssueFailure(ctx, actor, known, "invalid_client");
        fail(Reason.INVALID_CLIENT, "client authentication failed");
      }

      // A secret that verified recently skips the derivation, nothing else: the attempt is
      // still counted and decided under the row lock below.
      const cachedHash = secretCheck.remembered(clientId, req.clientSecret);
      let verifiedHash: string;
      let upgrade: string | undefined;
      if (cachedHash !== undefined) {
        await auditRefusal(ctx, actor, true, () => secretCheck.count(clientId));
        verifiedHash = cachedHash;
      } else {
        // Unknown clients cost the same derivation as a wrong secret.
        const candidate = await store.findByClientId(clientId);
        // Shed from memory, before the count and its audit row: not audited one by one.
        secretCheck.admit(clientId, candidate?.secretHash, ctx.values.get(kClientAddress));
        const known = candidate !== undefined;
        const checked = await auditRefusal(ctx, actor, known, () =>
          secretCheck.check(clientId, req.clientSecret, candidate?.secretHash, ctx.values.get(kClientAddress)),
        );
        if (!checked.ok) {
          await auditIssueFailure(ctx, actor, known, "invalid_client");
          fail(Reason.INVALID_CLIENT, "client authentication failed");
        }
        verifiedHash = checked.hash;
        upgrade = checked.upgrade;
      }

      let provenHash = verifiedHash;
      try {
        const issued = await db.transaction(async (trx) => {
          // The row stays locked through decision and signing so rotation and suspension are
          // ordered against this issuance; the costly derivation ran before the lock, so confirm
          // it checked the hash current under the lock (a rotation in between fails closed).
          const partner = await store.lockByClientId(trx, clientId);
          // Besides the hash it was checked against, the secret is proven for a rehash of it
          // that this or a concurrent issuance of this process stored.
          const current = (h: string | undefined) => h !== undefined && partner !== undefined && constantTimeEqual(partner.secretHash, h);
          if (!partner || !(current(verifiedHash) || current(upgrade) || current(secretCheck.remembered(clientId, req.clientSecret)))) {
            secretCheck.forget(clientId, req.clientSecret);
            fail(Reason.INVALID_CLIENT, "client authentication failed");
          }
          if (partner.status !== "active") {
            fail(Reason.CLIENT_INACTIVE, `client is ${partner.status}`);
          }
          const scopes = resolveTokenScopes(req.scope, partner.entitlements);
          if (!scopes.ok) fail(Reason.INVALID_SCOPE, "requested scope exceeds the client's entitlements");
          if (!deps.keyring.current()) fail(Reason.SIGNING_UNAVAILABLE, "signing is unavailable", {}, deps.keyring.problem());

          const now = deps.clock();
          const claims = partnerTokenClaims({ issuer: deps.issuer, audience: deps.audience, clientId, scopes: scopes.scopes, now });
          const accessToken = deps.keyring.signJwt(PARTNER_TOKEN_HEADER, claims);
          try {
            await audit.append(trx, {
              ...callFacts(ctx),
              actor,
              action: ISSUE_ACTION,
              outcome: "success",
              subject: claims.jti,
              at: now,
            });
          } catch (err) {
            fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
          }
          // A hash made with older scrypt parameters is replaced now that the secret proved right.
          provenHash = partner.secretHash;
          if (upgrade && current(verifiedHash)) provenHash = (await store.update(trx, clientId, { secretHash: upgrade }, now))!.secretHash;
          return { accessToken, tokenType: "Bearer", expiresIn: BigInt(PARTNER_TOKEN_TTL_SECONDS), scope: claims.scope };
        });
        secretCheck.remember(clientId, req.clientSecret, provenHash);
        return issued;
      } catch (err) {
        const detail = errorDetailOf(err);
        if (detail && detail.reason !== Reason.AUDIT_UNAVAILABLE) {
          await auditFailure(ctx, actor, ISSUE_ACTION, reasonLabel(detail.reason));
        }
        throw err;
      }
    },

    async createPartner(req, ctx) {
      const name = req.name.trim();
      if (name.length === 0 || name.length > 200) fail(Reason.INVALID_REQUEST, "name must be 1 to 200 characters");
      const slug = req.slug ? req.slug : slugFromName(name);
      if (!slug || !isValidSlug(slug)) {
        fail(Reason.INVALID_REQUEST, "slug must be 1-32 lower-case letters, digits or inner '-'");
      }
      const entitlements = req.entitlements ? [...new Set(req.entitlements.scopes)] : [...CONSENT_SCOPES];
      checkEntitlements(entitlements);
      const status = req.status === PartnerStatus.UNSPECIFIED ? "active" : statusName[req.status];
      if (status !== "active" && status !== "pending") fail(Reason.INVALID_REQUEST, "a new partner is active or pending");
      const webhookUrl = req.webhookUrl ? checkWebhookUrl(req.webhookUrl) : null;

      const clientSecret = generateClientSecret();
      const secretHash = await deps.secrets.hash(clientSecret);
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
          createdAt: now,
          updatedAt: now,
        };
        // A client_id collision (8 random hex chars) is retried with a fresh suffix.
        const inserted = await adminChange(ctx, "partner.create", record.clientId, async (trx) => (await store.insert(trx, record)).inserted);
        if (inserted) return { partner: toProto(record), clientSecret };
      }
      return fail(Reason.INTERNAL, "could not allocate a client id");
    },

    async rotateSecret(req, ctx) {
      const clientSecret = generateClientSecret();
      const secretHash = await deps.secrets.hash(clientSecret);
      // Replaces the hash at once; client_id and status unchanged.
      await adminChange(ctx, "partner.rotate_secret", req.clientId, async (trx) => {
        const locked = await store.lockByClientId(trx, req.clientId);
        if (!locked) fail(Reason.NOT_FOUND, "no such partner");
        return store.update(trx, req.clientId, { secretHash }, deps.clock());
      });
      return { clientId: req.clientId, clientSecret };
    },

    async setPartnerStatus(req, ctx) {
      const status = statusName[req.status];
      if (!status) fail(Reason.INVALID_REQUEST, "status is required");
      const partner = await adminChange(ctx, `partner.set_status.${status}`, req.clientId, async (trx) => {
        const locked = await store.lockByClientId(trx, req.clientId);
        if (!locked) fail(Reason.NOT_FOUND, "no such partner");
        return (await store.update(trx, req.clientId, { status }, deps.clock()))!;
      });
      return { partner: toProto(partner) };
    },

    async setEntitlements(req, ctx) {
      const entitlements = [...new Set(req.entitlements)];
      checkEntitlements(entitlements);
      const partner = await adminChange(ctx, "partner.set_entitlements", req.clientId, async (trx) => {
        const locked = await store.lockByClientId(trx, req.clientId);
        if (!locked) fail(Reason.NOT_FOUND, "no such partner");
        return (await store.update(trx, req.clientId, { entitlements }, deps.clock()))!;
      });
      return { partner: toProto(partner) };
    },

    async createUser(req, ctx) {
      const email = normaliseEmail(req.email);
      if (!email) fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
      const ids = await db.transaction(async (trx) => {
        const result = await deps.users.ensureUser(trx, { id: randomUUID(), email, vaultId: randomUUID(), at: deps.clock() });
        await audit.append(trx, {
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
    },

    async listPartners(req) {
      const limit = pageLimit(req.limit);
      const rows = await store.list(limit + 1, afterIdOf(req.cursor));
      const page = rows.slice(0, limit);
      return { partners: page.map(toProto), nextCursor: rows.length > limit ? cursorOf(page[page.length - 1]!.id) : "" };
    },

    async listUsers(req) {
      const limit = pageLimit(req.limit);
      const rows = await deps.users.list(db, limit + 1, afterIdOf(req.cursor));
      const page = rows.slice(0, limit);
      return { users: page.map(userToProto), nextCursor: rows.length > limit ? cursorOf(page[page.length - 1]!.id) : "" };
    },

    async getUserByEmail(req) {
      const email = normaliseEmail(req.email);
      if (!email) fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
      const user = await deps.users.findByEmail(db, email);
      if (!user) fail(Reason.NOT_FOUND, "no such user");
      return { user: userToProto(user) };
    },

    async getPartner(req) {
      const partner = await store.findByClientId(req.clientId);
      if (!partner) fail(Reason.NOT_FOUND, "no such partner");
      return { partner: toProto(partner) };
    },
  };
}

const DEFAULT_PAGE = 50;
const MAX_PAGE = 200;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function pageLimit(limit: number): number {
  return limit === 0 ? DEFAULT_PAGE : Math.min(limit, MAX_PAGE);
}

/** A list cursor names the last row of the previous page; opaque to callers. */
function cursorOf(id: string): string {
  return Buffer.from(id).toString("base64url");
}

function afterIdOf(cursor: string): string | undefined {
  if (!cursor) return undefined;
  const id = cursor.length <= 64 ? Buffer.from(cursor, "base64url").toString() : "";
  if (!UUID.test(id)) fail(Reason.INVALID_REQUEST, "cursor must be a next_cursor this list returned");
  return id;
}

function userToProto(u: UserListing) {
  return { userId: u.id, email: u.email, status: u.status, vaultId: u.vaultId ?? "", createdAt: u.createdAt.toISOString() };
}

function checkEntitlements(entitlements: string[]): void {
  const unknown = entitlements.filter((s) => !PARTNER_SCOPES.includes(s));
  if (unknown.length > 0) fail(Reason.INVALID_REQUEST, `unknown entitlements: ${unknown.join(", ")}; allowed: ${PARTNER_SCOPES.join(", ")}`);
}

function checkWebhookUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return fail(Reason.INVALID_REQUEST, "webhook_url must be an absolute URL");
  }
  const loopback = ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback)) {
    fail(Reason.INVALID_REQUEST, "webhook_url must be https (http only on loopback)");
  }
  return url.toString();
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
  };
}

/** The audit `reason` label of a failure: the snake_case Reason name. */
function reasonLabel(reason: Reason): string {
  return (Reason[reason] ?? "unspecified").toLowerCase();
}
