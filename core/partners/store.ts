import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { textArray } from "../db/rows.js";

export type PartnerStatusName = "active" | "pending" | "suspended";

export interface PartnerRecord {
  id: string;
  name: string;
  slug: string;
  clientId: string;
  secretHash: string;
  status: PartnerStatusName;
  entitlements: string[];
  webhookUrl: string | null;
  /** When webhookUrl answered 410 Gone (deliveries paused until it is set again); null while they run. */
  webhookGoneAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

type Conn = Knex | Knex.Transaction;

/** SQL for partner records. */
export function createPartnersStore(db: Db) {
  return {
    /** A new partner; `webhookSecretEnc` is its sealed webhook signing secret when it has a URL. */
    async insert(conn: Conn, p: PartnerRecord, webhookSecretEnc: string | null = null): Promise<{ inserted: boolean }> {
      try {
        await conn("partners").insert({
          id: p.id,
          name: p.name,
          slug: p.slug,
          client_id: p.clientId,
          secret_hash: p.secretHash,
          status: p.status,
          entitlements: p.entitlements,
          webhook_url: p.webhookUrl,
          webhook_secret_enc: webhookSecretEnc,
          created_at: p.createdAt,
          updated_at: p.updatedAt,
        });
        return { inserted: true };
      } catch (err) {
        if ((err as { code?: string }).code === "23505") return { inserted: false };
        throw err;
      }
    },

    async findByClientId(clientId: string, conn: Conn = db): Promise<PartnerRecord | undefined> {
      const row = await conn("partners").where({ client_id: clientId }).first();
      return row ? toPartner(row) : undefined;
    },

    /** Reads and locks the row until the transaction ends (issuance decides and signs under this lock). */
    async lockByClientId(trx: Knex.Transaction, clientId: string): Promise<PartnerRecord | undefined> {
      const row = await trx("partners").where({ client_id: clientId }).forUpdate().first();
      return row ? toPartner(row) : undefined;
    },

    /** The partner's status, held FOR SHARE until the transaction ends, so a suspension waits for it or is seen. */
    async holdStatus(trx: Knex.Transaction, partnerId: string): Promise<PartnerStatusName | undefined> {
      const row = await trx("partners").select("status").where({ id: partnerId }).forShare().first();
      return row ? (String(row.status) as PartnerStatusName) : undefined;
    },

    /** The partner's status and entitlements, held FOR SHARE like holdStatus (what a webhook about to leave is checked against). */
    async holdForDelivery(
      trx: Knex.Transaction,
      partnerId: string,
    ): Promise<{ status: PartnerStatusName; entitlements: string[]; webhookGeneration: number } | undefined> {
      const { rows } = await trx.raw(`SELECT status, entitlements, webhook_generation FROM partners WHERE id = ? FOR SHARE`, [partnerId]);
      const row = (rows as { status: PartnerStatusName; entitlements: unknown; webhook_generation: number }[])[0];
      return row ? { status: row.status, entitlements: textArray(row.entitlements), webhookGeneration: Number(row.webhook_generation) } : undefined;
    },

    /**
     * Up to `limit` partners, oldest first, after the partner with id `afterId` (keyset
     * paging on created_at, id; the caller checked afterId is a UUID).
     */
    async list(limit: number, afterId: string | undefined, conn: Conn = db): Promise<PartnerRecord[]> {
      const q = conn("partners")
        .orderBy([{ column: "created_at" }, { column: "id" }])
        .limit(limit);
      if (afterId) q.whereRaw("(created_at, id) > (SELECT created_at, id FROM partners WHERE id = ?)", [afterId]);
      return (await q).map(toPartner);
    },

    async update(
      trx: Knex.Transaction,
      clientId: string,
      changes: Partial<Pick<PartnerRecord, "secretHash" | "status" | "entitlements">>,
      at: Date,
    ): Promise<PartnerRecord | undefined> {
      const patch: Record<string, unknown> = { updated_at: at };
      if (changes.secretHash !== undefined) patch.secret_hash = changes.secretHash;
      if (changes.status !== undefined) patch.status = changes.status;
      if (changes.entitlements !== undefined) patch.entitlements = changes.entitlements;
      const rows = await trx("partners").where({ client_id: clientId }).update(patch).returning("*");
      return rows[0] ? toPartner(rows[0]) : undefined;
    },
  };
}

export type PartnersStore = ReturnType<typeof createPartnersStore>;

function toPartner(r: Record<string, unknown>): PartnerRecord {
  return {
    id: String(r.id),
    name: String(r.name),
    slug: String(r.slug),
    clientId: String(r.client_id),
    secretHash: String(r.secret_hash),
    status: r.status as PartnerStatusName,
    entitlements: textArray(r.entitlements),
    webhookUrl: r.webhook_url == null ? null : String(r.webhook_url),
    webhookGoneAt: r.webhook_gone_at == null ? null : new Date(r.webhook_gone_at as string | Date),
    createdAt: new Date(r.created_at as string | Date),
    updatedAt: new Date(r.updated_at as string | Date),
  };
}
