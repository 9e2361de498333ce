import { randomInt, randomUUID } from "node:crypto";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import { FEED_START, positionXid, type CursorCodec, type FeedPosition } from "../paging.js";
import type { PartnerAccess } from "./access.js";
import type { PartnersStore } from "./store.js";
import type { KycRecord, LedgerEntry, ResourcesStore } from "./resources-store.js";
import { normaliseEmail, type UsersStore } from "../identity/users-store.js";
import { CONSENT_SCOPES } from "./scopes.js";
import type { KycProvider } from "./kyc-providers.js";
import { enqueue, type EventType, type OutboxStore } from "./webhooks/outbox-store.js";
import { generateWebhookSecret, parseWebhookSecret, type SecretBox } from "./webhooks/signing.js";
import { UUID } from "../uuid.js";
import { checkConsentScopes, checkHttpsUrl, kycJson, kycOut, transferJson, transferOut, usAccountOut } from "./resources-wire.js";
import { CHAINS, type ConsentScope } from "../../lib/vocabulary.js";

export interface PartnerResourcesDeps {
  db: Db;
  access: PartnerAccess;
  partners: PartnersStore;
  users: UsersStore;
  resources: ResourcesStore;
  outbox: OutboxStore;
  audit: AuditStore;
  cursors: CursorCodec;
  box: SecretBox;
  kycProviders: KycProvider[];
  /** The provider used when a link request names none. */
  defaultKycProvider: string;
  clock: () => Date;
  logger: Logger;
}

const KYC_STATUSES = ["not_started", "pending", "approved", "rejected"] as const;
const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 100;

type Page = { limit: number; cursor: string; since: string } | undefined;

export function createPartnerResourcesService(deps: PartnerResourcesDeps): ServiceImpl<typeof PartnerResourcesService> {
  const { db, access, resources, audit } = deps;
  const providers = new Map(deps.kycProviders.map((p) => [p.name, p]));

  /** Admin mutation in one transaction with its audit row. */
  async function adminChange<T>(ctx: HandlerContext, action: string, subject: string, work: (trx: Knex.Transaction) => Promise<T>) {
    return db.transaction(async (trx) => {
      const result = await work(trx);
      await audit.append(trx, { ...callFacts(ctx), actor: "admin", action, outcome: "success", subject, at: deps.clock() });
      return result;
    });
  }

  async function lockUser(trx: Knex.Transaction, userId: string) {
    if (!UUID.test(userId)) fail(Reason.INVALID_REQUEST, "user_id must be a UUID");
    const user = await deps.users.lockUser(trx, userId);
    if (!user) fail(Reason.NOT_FOUND, "no such user");
    return user;
  }

  /** Emits one event per consenting partner, in partner id order. */
  async function emit(trx: Knex.Transaction, userId: string, scope: ConsentScope, type: EventType, data: Record<string, unknown>) {
    for (const partnerId of await resources.partnersConsenting(trx, userId, scope)) await enqueue(trx, partnerId, type, data, deps.clock());
  }

  /**
   * Resolves paging input to a feed position. Cursors are signed and bound to one partner's view
   * of one list, so anything else is invalid_cursor; older ones without an xid mean xid 0.
   */
  function position(page: Page, binding: string): { after: FeedPosition; limit: number } {
    const limit = !page || page.limit === 0 ? DEFAULT_LIMIT : page.limit;
    if (limit < 1 || limit > MAX_LIMIT) fail(Reason.INVALID_REQUEST, `limit must be 1 to ${MAX_LIMIT}`);
    if (page?.cursor && page.since) fail(Reason.INVALID_REQUEST, "send cursor or since, not both");
    const token = page?.cursor || page?.since;
    if (!token) return { after: FEED_START, limit };
    const kind = page?.cursor ? "c" : "w";
    const decoded = deps.cursors.decode(token);
    const xid = decoded ? positionXid(decoded.x) : undefined;
    if (
      !decoded ||
      xid === undefined ||
      decoded.k !== kind ||
      decoded.b !== binding ||
      typeof decoded.a !== "number" ||
      !Number.isSafeInteger(decoded.a) ||
      decoded.a < 0
    ) {
      fail(Reason.INVALID_CURSOR, kind === "c" ? "cursor is malformed or no longer valid" : "since is not a watermark of this list");
    }
    return { after: { xid, seq: decoded.a }, limit };
  }

  function pageOut<T>(rows: { row: T; position: FeedPosition }[], limit: number, after: FeedPosition, binding: string) {
    const page = rows.slice(0, limit);
    const last = page.at(-1)?.position;
    const at = last ?? after;
    return {
      page: page.map((r) => r.row),
      nextCursor: rows.length > limit && last ? deps.cursors.encode({ k: "c", b: binding, a: last.seq, x: last.xid }) : "",
      watermark: deps.cursors.encode({ k: "w", b: binding, a: at.seq, x: at.xid }),
    };
  }

  async function kycOf(userId: string): Promise<KycRecord> {
    const kyc = await resources.getKyc(db, userId);
    if (kyc) return kyc;
    const user = await deps.users.findById(db, userId);
    return { userId, status: "not_started", provider: null, updatedAt: user?.createdAt ?? deps.clock() };
  }

  return {
    async authorizePartner(req, ctx) {
      const principal = await access.authorize(ctx, {
        token: req.accessToken,
        operation: req.scope ? `authorize.${req.scope}` : "authorize",
        userId: req.userId || undefined,
        // From the wire: a scope no consent can hold is refused grant_required, like a missing consent.
        scope: (req.scope || undefined) as ConsentScope | undefined,
      });
      return { partnerId: principal.partnerId, clientId: principal.clientId, tokenScopes: principal.tokenScopes };
    },

    async preCreateUser(req, ctx) {
      const principal = await access.authorize(ctx, { token: req.accessToken, operation: "users.create" });
      const email = normaliseEmail(req.email);
      if (!email) fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
      // One transaction: user, receipt and audit row commit together or not at all, so a
      // retry after audit_unavailable answers exactly as the first call would have.
      return db.transaction(async (trx) => {
        const now = deps.clock();
        const user = await deps.users.ensureUser(trx, { id: randomUUID(), email, vaultId: randomUUID(), at: now });
        const receipt = await resources.addReceipt(trx, principal.partnerId, user.userId, now);
        try {
          await audit.append(trx, {
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
    },

    async getKycStatus(req, ctx) {
      // One round trip: checks, audit row and the record (the audit row is committed
      // before this returns, so it precedes the data leaving).
      const principal = await access.authorize(ctx, {
        token: req.accessToken,
        operation: "kyc.read",
        userId: req.userId,
        scope: "kyc:read",
        auditRead: true,
        withKyc: true,
      });
      return kycOut(principal.kyc ?? { userId: req.userId, status: "not_started", provider: null, updatedAt: principal.userCreatedAt ?? deps.clock() });
    },

    async createKycLink(req, ctx) {
      const principal = await access.authorize(ctx, { token: req.accessToken, operation: "kyc.link", userId: req.userId, scope: "kyc:read" });
      const name = req.provider || deps.defaultKycProvider;
      const provider = providers.get(name);
      if (!provider) fail(Reason.INVALID_REQUEST, `unknown provider; available: ${[...providers.keys()].join(", ")}`);
      if (req.redirectUri) checkHttpsUrl(req.redirectUri, "redirect_uri");
      const kyc = await kycOf(req.userId);
      if (kyc.status === "approved" && kyc.provider && kyc.provider !== name) {
        fail(Reason.KYC_PROVIDER_CONFLICT, "the user is already verified with another provider");
      }
      let link: { url: string; expiresAt: Date };
      try {
        link = await provider.createLink({ userId: req.userId, redirectUri: req.redirectUri || undefined, now: deps.clock() });
        checkHttpsUrl(link.url, "provider url");
      } catch (err) {
        // Whatever the provider did (refused, threw, or handed back an unusable URL), the
        // client sees one fixed 503; the cause goes to the logs.
        fail(Reason.PROVIDER_UNAVAILABLE, "the verification provider is unavailable", {}, err);
      }
      await access.audited(ctx, principal, "kyc.link", req.userId);
      return { url: link.url, provider: name, expiresAt: link.expiresAt.toISOString() };
    },

    async listWallets(req, ctx) {
      await access.authorize(ctx, { token: req.accessToken, operation: "wallets.read", userId: req.userId, scope: "wallet:read", auditRead: true });
      const wallets = await resources.listWallets(db, req.userId);
      return { userId: req.userId, wallets };
    },

    async getUsAccount(req, ctx) {
      await access.authorize(ctx, { token: req.accessToken, operation: "us_account.read", userId: req.userId, scope: "us_account:read", auditRead: true });
      const account = await resources.getUsAccount(db, req.userId);
      return usAccountOut(req.userId, account);
    },

    async listTransfers(req, ctx) {
      const principal = await access.authorize(ctx, { token: req.accessToken, operation: "transfers.read", userId: req.userId, scope: "transfers:read" });
      const binding = `t:${principal.partnerId}:${req.userId}`;
      const { after, limit } = position(req.page, binding);
      const rows = await resources.listLedger(db, req.userId, after, limit + 1);
      const out = pageOut(rows, limit, after, binding);
      // Paging input is validated before the audit row: a refused cursor reads nothing.
      await access.audited(ctx, principal, "transfers.read", req.userId);
      return { data: out.page.map(transferOut), nextCursor: out.nextCursor, watermark: out.watermark };
    },

    async listEvents(req, ctx) {
      const principal = await access.authorize(ctx, { token: req.accessToken, operation: "events.read" });
      const binding = `e:${principal.partnerId}`;
      const { after, limit } = position(req.page, binding);
      const rows = await deps.outbox.list(db, principal.partnerId, after, limit + 1);
      const out = pageOut(rows, limit, after, binding);
      await access.audited(ctx, principal, "events.read", "");
      return {
        data: out.page.map((e) => ({ eventId: e.id, type: e.type, createdAt: e.createdAt.toISOString(), dataJson: JSON.stringify(e.data) })),
        nextCursor: out.nextCursor,
        watermark: out.watermark,
      };
    },

    async setKycStatus(req, ctx) {
      if (!(KYC_STATUSES as readonly string[]).includes(req.status)) fail(Reason.INVALID_REQUEST, `status must be one of ${KYC_STATUSES.join(", ")}`);
      if (req.provider && !/^[a-z0-9][a-z0-9_-]{0,63}$/.test(req.provider))
        fail(Reason.INVALID_REQUEST, "provider must be 1-64 lower-case letters, digits, '-' or '_'");
      const kyc = await adminChange(ctx, "user.set_kyc", req.userId, async (trx) => {
        await lockUser(trx, req.userId);
        const before = await resources.getKyc(trx, req.userId);
        const next: KycRecord = { userId: req.userId, status: req.status as KycRecord["status"], provider: req.provider || null, updatedAt: deps.clock() };
        await resources.upsertKyc(trx, next);
        if (!before || before.status !== next.status || before.provider !== next.provider) {
          await emit(trx, req.userId, "kyc:read", "kyc.status_changed", kycJson(next));
        }
        return next;
      });
      return { kyc: kycOut(kyc) };
    },

    async setUserStatus(req, ctx) {
      if (req.status !== "active" && req.status !== "inactive") fail(Reason.INVALID_REQUEST, "status must be active or inactive");
      await adminChange(ctx, `user.set_status.${req.status}`, req.userId, async (trx) => {
        await lockUser(trx, req.userId);
        await deps.users.setUserStatus(trx, req.userId, req.status as "active" | "inactive");
      });
      return { userId: req.userId, status: req.status };
    },

    async addWallet(req, ctx) {
      if (!(CHAINS as readonly string[]).includes(req.chain)) fail(Reason.INVALID_REQUEST, `chain must be one of ${CHAINS.join(", ")}`);
      const evm = /^0x[0-9a-fA-F]{40}$/;
      const solana = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;
      if (!(req.chain === "sol" ? solana : evm).test(req.address)) fail(Reason.INVALID_REQUEST, `address is not a ${req.chain} public address`);
      const wallets = await adminChange(ctx, "user.add_wallet", req.userId, async (trx) => {
        await lockUser(trx, req.userId);
        await resources.addWallet(trx, req.userId, req.chain, req.address, deps.clock());
        return resources.listWallets(trx, req.userId);
      });
      return { userId: req.userId, wallets };
    },

    async provisionUsAccount(req, ctx) {
      const account = await adminChange(ctx, "user.provision_us_account", req.userId, async (trx) => {
        await lockUser(trx, req.userId);
        const user = await deps.users.findById(trx, req.userId);
        await resources.insertUsAccount(
          trx,
          {
            userId: req.userId,
            bankName: "Vaultgate Sandbox Bank",
            routingNumber: "021000021",
            accountNumber: String(randomInt(10 ** 9, 10 ** 10)) + String(randomInt(100, 1000)),
            accountType: "checking",
            beneficiaryName: user!.email,
          },
          deps.clock(),
        );
        return resources.getUsAccount(trx, req.userId);
      });
      return { account: usAccountOut(req.userId, account) };
    },

    async grantConsent(req, ctx) {
      const wanted = req.scopes ? [...new Set(req.scopes.scopes)] : [...CONSENT_SCOPES];
      checkConsentScopes(wanted);
      const scopes = await adminChange(ctx, "consent.grant", `${req.clientId}:${req.userId}`, async (trx) => {
        const partner = await deps.partners.findByClientId(req.clientId, trx);
        if (!partner) fail(Reason.NOT_FOUND, "no such partner");
        await lockUser(trx, req.userId);
        const current = (await resources.getConsent(trx, partner.id, req.userId)) ?? [];
        const next = CONSENT_SCOPES.filter((s) => current.includes(s) || wanted.includes(s));
        await resources.putConsent(trx, partner.id, req.userId, next, deps.clock());
        return next;
      });
      return { scopes };
    },

    async revokeConsent(req, ctx) {
      const removed = req.scopes ? [...new Set(req.scopes.scopes)] : [...CONSENT_SCOPES];
      checkConsentScopes(removed);
      const scopes = await adminChange(ctx, "consent.revoke", `${req.clientId}:${req.userId}`, async (trx) => {
        const partner = await deps.partners.findByClientId(req.clientId, trx);
        if (!partner) fail(Reason.NOT_FOUND, "no such partner");
        await lockUser(trx, req.userId);
        const current = await resources.getConsent(trx, partner.id, req.userId);
        if (current === undefined) fail(Reason.NOT_FOUND, "no consent to revoke");
        // The row stays (empty = revoked): the user remains known to the partner (grant_required, not user_not_found).
        const next = current.filter((s) => !removed.includes(s));
        await resources.putConsent(trx, partner.id, req.userId, next, deps.clock());
        return next;
      });
      return { scopes };
    },

    async recordLedgerEntry(req, ctx) {
      if (req.direction !== "credit" && req.direction !== "debit") fail(Reason.INVALID_REQUEST, "direction must be credit or debit");
      const amount = Number(req.amountCents);
      if (!Number.isSafeInteger(amount) || amount < 0) fail(Reason.INVALID_REQUEST, "amount_cents must be an integer from 0 to 9007199254740991");
      const currency = req.currency || "USD";
      if (!/^[A-Z]{3}$/.test(currency)) fail(Reason.INVALID_REQUEST, "currency must be an ISO 4217 code");
      const status = req.status || "settled";
      if (!["pending", "settled", "failed"].includes(status)) fail(Reason.INVALID_REQUEST, "status must be pending, settled or failed");
      const entry = await adminChange(ctx, "ledger.record", req.userId, async (trx) => {
        await lockUser(trx, req.userId);
        const now = deps.clock();
        const e = await resources.insertLedgerEntry(trx, {
          id: randomUUID(),
          userId: req.userId,
          direction: req.direction as LedgerEntry["direction"],
          amountCents: amount,
          currency,
          status: status as LedgerEntry["status"],
          createdAt: now,
          updatedAt: now,
        });
        if (e.status !== "pending") {
          await emit(trx, req.userId, "transfers:read", e.status === "settled" ? "transfer.settled" : "transfer.failed", {
            user_id: e.userId,
            ...transferJson(e),
          });
        }
        return e;
      });
      return { transfer: transferOut(entry) };
    },

    async setWebhook(req, ctx) {
      const url = req.url ? checkHttpsUrl(req.url, "url") : null;
      let secret = req.secret;
      if (secret && !parseWebhookSecret(secret)) fail(Reason.INVALID_REQUEST, "secret must be whsec_ followed by 24 to 64 bytes in base64");
      if (!secret) secret = generateWebhookSecret();
      await adminChange(ctx, "partner.set_webhook", req.clientId, async (trx) => {
        const locked = await deps.partners.lockByClientId(trx, req.clientId);
        if (!locked) fail(Reason.NOT_FOUND, "no such partner");
        await deps.outbox.setWebhook(trx, req.clientId, url, url ? deps.box.seal(secret) : null);
      });
      return { clientId: req.clientId, url: url ?? "", secret: url ? secret : "" };
    },
  };
}
