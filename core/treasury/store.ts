import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { movementCtes } from "../ledger/store.js";
import { bindLegs, fundLegs } from "./ledger.js";

export type TreasuryStatusName = "active" | "suspended" | "disabled" | "mandate_expired";

export interface TreasuryLimits {
  capPerItemCents: number | null;
  capPerDayCents: number | null;
  capLifetimeCents: number | null;
  stepUpAmountCents: number | null;
}

export interface TreasuryRecord extends TreasuryLimits {
  partnerId: string;
  payerEntityId: string;
  currency: string;
  status: TreasuryStatusName;
  balanceCents: number;
  spentLifetimeCents: number;
  /** UTC day (YYYY-MM-DD) that spentDayCents counts; null before the first payout. */
  spentDay: string | null;
  spentDayCents: number;
}

export interface BatchRecord {
  id: string;
  partnerId: string;
  idempotencyKey: string;
  requestHash: string;
  /** The first answer (a serialized Batch), stored so a replay returns it unchanged. */
  response: Uint8Array;
  createdAt: Date;
}

export interface ExecutionRecord {
  partnerId: string;
  executionId: string;
  payoutId: string;
  batchId: string;
  recipientUserId: string;
  payerEntityId: string;
  amountCents: number;
  currency: string;
  reference: string;
  executedAt: Date;
}

/** A ledger movement's id and time, chosen by the caller. */
export interface MovementStamp {
  id: string;
  at: Date;
}

export interface RecipientRecord {
  userId: string;
  status: "active" | "inactive";
  scopes: string[];
}

type Conn = Knex | Knex.Transaction;

async function lock(trx: Knex.Transaction, partnerId: string): Promise<TreasuryRecord | undefined> {
  const row = await trx("treasuries").where({ partner_id: partnerId }).forUpdate().first();
  return row ? toTreasury(row) : undefined;
}

/** SQL for treasuries, batches and executions. */
export function createTreasuryStore(db: Db) {
  return {
    async find(partnerId: string, conn: Conn = db): Promise<TreasuryRecord | undefined> {
      const row = await conn("treasuries").where({ partner_id: partnerId }).first();
      return row ? toTreasury(row) : undefined;
    },

    /** Reads and locks the treasury until the transaction ends: batches on one treasury run one at a time. */
    lock,

    /**
     * Inserts or replaces the binding (spent totals and status survive a rebind) and
     * records the balance it sets in the ledger: the difference to what the treasury held
     * is one "treasury.bind" movement, in the statement that sets it.
     *
     * A new treasury is first inserted empty (`ON CONFLICT DO NOTHING`: a concurrent first
     * bind waits for the other's commit and then finds its row), then the row is locked and
     * read, so the difference is computed from the balance no fund, batch or bind can change
     * until this transaction ends.
     */
    async bind(
      trx: Knex.Transaction,
      t: Pick<TreasuryRecord, "partnerId" | "payerEntityId" | "currency" | "balanceCents"> & TreasuryLimits,
      movement: MovementStamp,
    ): Promise<{ treasury: TreasuryRecord; created: boolean }> {
      const inserted = await trx.raw(
        `INSERT INTO treasuries (partner_id, payer_entity_id, currency, status, balance_cents, created_at, updated_at)
         VALUES (?, ?, ?, 'active', 0, ?, ?) ON CONFLICT (partner_id) DO NOTHING RETURNING partner_id`,
        [t.partnerId, t.payerEntityId, t.currency, movement.at, movement.at],
      );
      const created = (inserted.rows as unknown[]).length > 0;
      const before = (await lock(trx, t.partnerId))!;
      const legs = bindLegs(t.partnerId, before, t);
      const ledger = legs.length > 0 ? movementCtes({ ...movement, kind: "treasury.bind", reference: `treasury:${t.partnerId}`, legs }) : undefined;
      const { rows } = await trx.raw(
        `${ledger ? `WITH ${ledger.sql} ` : ""}UPDATE treasuries SET
           payer_entity_id = ?, currency = ?, balance_cents = ?, cap_per_item_cents = ?, cap_per_day_cents = ?,
           cap_lifetime_cents = ?, step_up_amount_cents = ?, updated_at = ?
          WHERE partner_id = ? RETURNING *`,
        [
          ...(ledger?.bindings ?? []),
          t.payerEntityId,
          t.currency,
          t.balanceCents,
          t.capPerItemCents,
          t.capPerDayCents,
          t.capLifetimeCents,
          t.stepUpAmountCents,
          movement.at,
          t.partnerId,
        ],
      );
      return { treasury: toTreasury((rows as Record<string, unknown>[])[0]!), created };
    },

    async setStatus(trx: Knex.Transaction, partnerId: string, status: TreasuryStatusName, at: Date): Promise<TreasuryRecord | undefined> {
      const rows = await trx("treasuries").where({ partner_id: partnerId }).update({ status, updated_at: at }).returning("*");
      return rows[0] ? toTreasury(rows[0]) : undefined;
    },

    /**
     * Adds to the balance of a treasury locked by this transaction (so its currency cannot
     * change) and records it in the ledger (external:funding -> treasury), in one statement.
     */
    async fund(trx: Knex.Transaction, locked: Pick<TreasuryRecord, "partnerId" | "currency">, amountCents: number, movement: MovementStamp): Promise<TreasuryRecord> {
      const ledger = movementCtes({
        ...movement,
        kind: "treasury.fund",
        reference: `treasury:${locked.partnerId}`,
        legs: fundLegs(locked.partnerId, locked.currency, amountCents),
      });
      const { rows } = await trx.raw(`WITH ${ledger.sql} UPDATE treasuries SET balance_cents = balance_cents + ?, updated_at = ? WHERE partner_id = ? RETURNING *`, [
        ...ledger.bindings,
        amountCents,
        movement.at,
        locked.partnerId,
      ]);
      return toTreasury((rows as Record<string, unknown>[])[0]!);
    },

    async findBatch(partnerId: string, idempotencyKey: string, conn: Conn = db): Promise<BatchRecord | undefined> {
      const row = await conn("treasury_batches").where({ partner_id: partnerId, idempotency_key: idempotencyKey }).first();
      return row ? toBatch(row) : undefined;
    },

    /**
     * Records a batch and debits it on the locked treasury row, in one statement.
     * `inserted: false` (and no debit) when the key was taken meanwhile.
     */
    async recordBatch(
      trx: Knex.Transaction,
      b: BatchRecord,
      d: { amountCents: number; day: string; dayCents: number },
    ): Promise<{ inserted: boolean }> {
      const { rows } = await trx.raw(
        `WITH batch AS (
           INSERT INTO treasury_batches (id, partner_id, idempotency_key, request_hash, response, created_at)
           VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (partner_id, idempotency_key) DO NOTHING RETURNING partner_id
         )
         UPDATE treasuries t SET balance_cents = t.balance_cents - ?, spent_lifetime_cents = t.spent_lifetime_cents + ?,
                spent_day = ?, spent_day_cents = ?, updated_at = ?
           FROM batch WHERE t.partner_id = batch.partner_id
         RETURNING t.partner_id`,
        [
          b.id,
          b.partnerId,
          b.idempotencyKey,
          b.requestHash,
          Buffer.from(b.response.buffer, b.response.byteOffset, b.response.byteLength),
          b.createdAt,
          d.amountCents,
          d.amountCents,
          d.day,
          d.dayCents,
          b.createdAt,
        ],
      );
      return { inserted: (rows as unknown[]).length > 0 };
    },

    /** Executions of this partner that reuse any of the given execution or payout ids. */
    async findExecutions(trx: Knex.Transaction, partnerId: string, executionIds: string[], payoutIds: string[]): Promise<ExecutionRecord[]> {
      const { rows } = await trx.raw(
        // Two index probes (primary key, payout unique key) rather than one OR scan.
        `SELECT * FROM treasury_executions WHERE partner_id = ? AND execution_id = ANY(?::text[])
         UNION
         SELECT * FROM treasury_executions WHERE partner_id = ? AND payout_id = ANY(?::text[])`,
        [partnerId, executionIds, partnerId, payoutIds],
      );
      return (rows as Record<string, unknown>[]).map(toExecution);
    },

    /**
     * Every execution of a batch in one multi-row INSERT; rows whose execution_id or
     * payout_id this partner already used are skipped. Returns the inserted execution ids.
     */
    async insertExecutions(trx: Knex.Transaction, executions: ExecutionRecord[]): Promise<Set<string>> {
      if (executions.length === 0) return new Set();
      const columns = [
        "partner_id",
        "execution_id",
        "payout_id",
        "batch_id",
        "recipient_user_id",
        "payer_entity_id",
        "amount_cents",
        "currency",
        "reference",
        "executed_at",
      ];
      // unnest keeps the statement text and parameter count fixed whatever the batch size.
      const { rows } = await trx.raw(
        `INSERT INTO treasury_executions (${columns.join(", ")})
         SELECT ?::uuid, e.execution_id, e.payout_id, ?::uuid, e.recipient_user_id, ?::uuid, e.amount_cents, e.currency, e.reference, ?::timestamptz
           FROM unnest(?::text[], ?::text[], ?::uuid[], ?::int8[], ?::text[], ?::text[])
                AS e(execution_id, payout_id, recipient_user_id, amount_cents, currency, reference)
         ON CONFLICT DO NOTHING
         RETURNING execution_id`,
        [
          executions[0]!.partnerId,
          executions[0]!.batchId,
          executions[0]!.payerEntityId,
          executions[0]!.executedAt,
          executions.map((e) => e.executionId),
          executions.map((e) => e.payoutId),
          executions.map((e) => e.recipientUserId),
          executions.map((e) => String(e.amountCents)),
          executions.map((e) => e.currency),
          executions.map((e) => e.reference),
        ],
      );
      return new Set((rows as { execution_id: string }[]).map((r) => r.execution_id));
    },

    async findPayout(partnerId: string, userId: string, payoutId: string, conn: Conn = db): Promise<ExecutionRecord | undefined> {
      const row = await conn("treasury_executions").where({ partner_id: partnerId, payout_id: payoutId, recipient_user_id: userId }).first();
      return row ? toExecution(row) : undefined;
    },

    /** The recipients among `userIds` that exist, with their status and this partner's consent scopes. */
    async recipients(trx: Knex.Transaction, partnerId: string, userIds: string[]): Promise<RecipientRecord[]> {
      const { rows } = await trx.raw(
        `SELECT u.id AS user_id, u.status, coalesce(c.scopes, '{}') AS scopes
           FROM users u LEFT JOIN consents c ON c.user_id = u.id AND c.partner_id = ?
          WHERE u.id = ANY(?::uuid[])`,
        [partnerId, userIds],
      );
      return (rows as Record<string, unknown>[]).map((r) => ({
        userId: String(r.user_id),
        status: r.status as "active" | "inactive",
        scopes: parseTextArray(r.scopes),
      }));
    },
  };
}

export type TreasuryStore = ReturnType<typeof createTreasuryStore>;

const num = (v: unknown): number | null => (v == null ? null : Number(v));

function toTreasury(r: Record<string, unknown>): TreasuryRecord {
  return {
    partnerId: String(r.partner_id),
    payerEntityId: String(r.payer_entity_id),
    currency: String(r.currency),
    status: r.status as TreasuryStatusName,
    balanceCents: Number(r.balance_cents),
    capPerItemCents: num(r.cap_per_item_cents),
    capPerDayCents: num(r.cap_per_day_cents),
    capLifetimeCents: num(r.cap_lifetime_cents),
    stepUpAmountCents: num(r.step_up_amount_cents),
    spentLifetimeCents: Number(r.spent_lifetime_cents),
    spentDay: r.spent_day == null ? null : String(r.spent_day),
    spentDayCents: Number(r.spent_day_cents),
  };
}

function toBatch(r: Record<string, unknown>): BatchRecord {
  return {
    id: String(r.id),
    partnerId: String(r.partner_id),
    idempotencyKey: String(r.idempotency_key),
    requestHash: String(r.request_hash),
    response: r.response as Uint8Array,
    createdAt: new Date(r.created_at as string | Date),
  };
}

function toExecution(r: Record<string, unknown>): ExecutionRecord {
  return {
    partnerId: String(r.partner_id),
    executionId: String(r.execution_id),
    payoutId: String(r.payout_id),
    batchId: String(r.batch_id),
    recipientUserId: String(r.recipient_user_id),
    payerEntityId: String(r.payer_entity_id),
    amountCents: Number(r.amount_cents),
    currency: String(r.currency),
    reference: String(r.reference),
    executedAt: new Date(r.executed_at as string | Date),
  };
}

function parseTextArray(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === "string") return value.replace(/^\{|\}$/g, "").split(",").filter(Boolean);
  return [];
}
