import type { ConsentScope } from "../../lib/vocabulary.js";
import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { textArray } from "../db/rows.js";
import { createGroupCommit } from "../db/group-commit.js";
import { batchFunction } from "../db/sql.js";

type Conn = Knex | Knex.Transaction;

/** What the access checks need, read fresh in one statement with the rate-limit count. */
export interface AccessRow {
  partnerId: string;
  partnerStatus: string;
  rateCount: number;
  userExists: boolean;
  userStatus: string | null;
  hasReceipt: boolean;
  /** A consent row exists (its scopes may be empty: revoked). */
  hasConsent: boolean;
  /** The consent row's scopes include the requested scope. */
  consentCovers: boolean;
  userCreatedAt: Date | null;
  /** The success audit row was written by the same statement. */
  audited: boolean;
  /** With `withKyc`: the user's verification record, if any. */
  kyc?: KycRecord;
}

/**
 * Group commit of the access checks: at most this many requests per statement, and this
 * many statements at once (the rest of the pool serves the other queries). Chosen with
 * `npm run bench partner-resources`; see docs/reference/partner-api.md.
 */
export const ACCESS_MAX_BATCH = 64;
export const ACCESS_MAX_IN_FLIGHT = 2;

/** One request's access checks (see readAccess). */
export interface AccessInput {
  clientId: string;
  userId: string | null;
  /** The partner and operation's rate-limit key. */
  rateKey: string;
  windowStart: Date;
  limit: number;
  scope?: string;
  tokenHasScope?: boolean;
  audit?: { requestId: string; clientAddress: string; actor: string; action: string; subject: string; at: Date };
  withKyc?: boolean;
  /** The caller's ctx.signal: aborted before a batch takes the checks, they are withdrawn unwritten (see group commit). */
  signal?: AbortSignal;
}

export interface KycRecord {
  userId: string;
  status: "not_started" | "pending" | "approved" | "rejected";
  provider: string | null;
  updatedAt: Date;
}

export interface UsAccountRecord {
  userId: string;
  bankName: string;
  routingNumber: string;
  accountNumber: string;
  accountType: string;
  beneficiaryName: string;
}

/** SQL for the partner resources (users, consents, KYC, wallets, US accounts); transfers are the ledger room's. */
export function createResourcesStore(db: Db) {
  const accessBatch = batchFunction<AccessInput>("partner_access_batch", [
    ["text", (i) => i.clientId],
    ["uuid", (i) => i.userId],
    ["text", (i) => i.rateKey],
    ["timestamptz", (i) => i.windowStart.toISOString()],
    ["integer", (i) => String(i.limit)],
    ["boolean", (i) => String(i.tokenHasScope === true)],
    ["text", (i) => i.scope ?? ""],
    ["boolean", (i) => String(Boolean(i.audit))],
    ["text", (i) => i.audit?.requestId ?? ""],
    ["text", (i) => i.audit?.actor ?? ""],
    ["text", (i) => i.audit?.action ?? ""],
    ["text", (i) => i.audit?.subject ?? ""],
    ["timestamptz", (i) => (i.audit?.at ?? i.windowStart).toISOString()],
    ["boolean", (i) => String(i.withKyc === true)],
    ["text", (i) => i.audit?.clientAddress ?? ""],
  ]);
  /** The group-committed form of partner_access() (migration 0008): one statement per batch. */
  const readAccess = createGroupCommit<AccessInput, AccessRow | undefined>(
    async (items) => {
      const byIndex = new Map<number, Record<string, unknown>>();
      for (const r of await accessBatch(db, items)) byIndex.set(r.idx as number, r);
      return items.map((item, n) => {
        const r = byIndex.get(n + 1);
        return r ? toAccessRow(r, item.userId) : undefined;
      });
    },
    // A second batch of a key whose counter row a running batch holds would only wait for that commit.
    {
      maxBatch: ACCESS_MAX_BATCH,
      maxInFlight: ACCESS_MAX_IN_FLIGHT,
      name: "partner_access",
      signalOf: (i) => i.signal,
      lockKey: (i) => `${i.rateKey}\0${i.windowStart.getTime()}`,
    },
  );

  return {
    /**
     * A request's access checks, group-committed with its neighbours; with `audit`, the success audit
     * row is inserted in the same statement, so it is committed exactly when the caller may return data.
     * Undefined when the client id names no partner. An abort of `signal` before a batch takes the checks withdraws them (DeadlineExceeded).
     */
    readAccess,

    /** Records a partner's pre-creation receipt; inserted=false when it already existed. */
    async addReceipt(trx: Knex.Transaction, partnerId: string, userId: string, at: Date): Promise<{ inserted: boolean }> {
      const { rows } = await trx.raw(`INSERT INTO partner_users (partner_id, user_id, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING user_id`, [
        partnerId,
        userId,
        at,
      ]);
      return { inserted: (rows as unknown[]).length > 0 };
    },

    async getKyc(conn: Conn, userId: string): Promise<KycRecord | undefined> {
      const { rows } = await conn.raw(`SELECT user_id, status, provider, updated_at FROM user_kyc WHERE user_id = ?`, [userId]);
      const r = (rows as Record<string, unknown>[])[0];
      return r ? toKyc(r) : undefined;
    },

    async upsertKyc(trx: Knex.Transaction, k: KycRecord): Promise<void> {
      await trx.raw(
        `INSERT INTO user_kyc (user_id, status, provider, updated_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (user_id) DO UPDATE SET status = excluded.status, provider = excluded.provider, updated_at = excluded.updated_at`,
        [k.userId, k.status, k.provider, k.updatedAt],
      );
    },

    async listWallets(conn: Conn, userId: string): Promise<{ chain: string; address: string }[]> {
      const { rows } = await conn.raw(`SELECT chain, address FROM user_wallets WHERE user_id = ? ORDER BY created_at, chain, address`, [userId]);
      return rows as { chain: string; address: string }[];
    },

    async addWallet(trx: Knex.Transaction, userId: string, chain: string, address: string, at: Date): Promise<void> {
      await trx.raw(`INSERT INTO user_wallets (user_id, chain, address, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, [userId, chain, address, at]);
    },

    async getUsAccount(conn: Conn, userId: string): Promise<UsAccountRecord | undefined> {
      const { rows } = await conn.raw(`SELECT * FROM us_accounts WHERE user_id = ?`, [userId]);
      const r = (rows as Record<string, unknown>[])[0];
      return r
        ? {
            userId: String(r.user_id),
            bankName: String(r.bank_name),
            routingNumber: String(r.routing_number),
            accountNumber: String(r.account_number),
            accountType: String(r.account_type),
            beneficiaryName: String(r.beneficiary_name),
          }
        : undefined;
    },

    async insertUsAccount(trx: Knex.Transaction, a: UsAccountRecord, at: Date): Promise<void> {
      await trx.raw(
        `INSERT INTO us_accounts (user_id, bank_name, routing_number, account_number, account_type, beneficiary_name, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user_id) DO NOTHING`,
        [a.userId, a.bankName, a.routingNumber, a.accountNumber, a.accountType, a.beneficiaryName, at],
      );
    },

    async getConsent(trx: Knex.Transaction, partnerId: string, userId: string): Promise<string[] | undefined> {
      const { rows } = await trx.raw(`SELECT scopes FROM consents WHERE partner_id = ? AND user_id = ? FOR UPDATE`, [partnerId, userId]);
      const r = (rows as { scopes: unknown }[])[0];
      return r ? textArray(r.scopes) : undefined;
    },

    async putConsent(trx: Knex.Transaction, partnerId: string, userId: string, scopes: string[], at: Date): Promise<void> {
      await trx.raw(
        `INSERT INTO consents (partner_id, user_id, scopes, updated_at) VALUES (?, ?, ?::text[], ?)
         ON CONFLICT (partner_id, user_id) DO UPDATE SET scopes = excluded.scopes, updated_at = excluded.updated_at`,
        [partnerId, userId, toTextArray(scopes), at],
      );
    },

    /** Partners entitled to the scope whose current consent of this user includes it, in id order (lock order for events). */
    async partnersConsenting(trx: Knex.Transaction, userId: string, scope: ConsentScope): Promise<string[]> {
      const { rows } = await trx.raw(
        `SELECT c.partner_id FROM consents c JOIN partners p ON p.id = c.partner_id
          WHERE c.user_id = ? AND ? = ANY(c.scopes) AND ? = ANY(p.entitlements) ORDER BY c.partner_id`,
        [userId, scope, scope],
      );
      return (rows as { partner_id: string }[]).map((r) => String(r.partner_id));
    },
  };
}

export type ResourcesStore = ReturnType<typeof createResourcesStore>;

function toKyc(r: Record<string, unknown>): KycRecord {
  return {
    userId: String(r.user_id),
    status: r.status as KycRecord["status"],
    provider: r.provider == null ? null : String(r.provider),
    updatedAt: r.updated_at instanceof Date ? r.updated_at : new Date(String(r.updated_at)),
  };
}

function toAccessRow(r: Record<string, unknown>, userId: string | null): AccessRow {
  const kycUpdated = r.kyc_updated_ms as number | null;
  return {
    partnerId: r.partner_id as string,
    partnerStatus: r.partner_status as string,
    rateCount: r.rate_count as number,
    userExists: r.user_found === true,
    userStatus: (r.user_status as string | null) ?? null,
    userCreatedAt: r.user_created_ms == null ? null : new Date(r.user_created_ms as number),
    hasReceipt: r.has_receipt === true,
    hasConsent: r.has_consent === true,
    consentCovers: r.consent_covers === true,
    audited: r.audited === true,
    kyc:
      r.kyc_status != null && userId !== null && kycUpdated != null
        ? { userId, status: r.kyc_status as KycRecord["status"], provider: (r.kyc_provider as string | null) ?? null, updatedAt: new Date(kycUpdated) }
        : undefined,
  };
}

/** A Postgres text[] literal; scope names never contain quotes, commas or braces. */
function toTextArray(values: string[]): string {
  return `{${values.join(",")}}`;
}
