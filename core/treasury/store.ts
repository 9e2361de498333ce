import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { movementCtes } from "../ledger/store.js";
import { bindLegs, fundLegs, payoutMovementCtes, payoutTransferId } from "../ledger/treasury.js";
import { NEXT_TRANSFER_SEQ_SQL } from "../ledger/transfers.js";
import { createUsersStore } from "../identity/users-store.js";
import { enqueueCte } from "../partners/webhooks/outbox-store.js";
import { toBatch, toExecution, toTreasury } from "./records.js";
import { textArray } from "../db/rows.js";
import type {
  TreasuryStatusName,
  TreasuryLimits,
  TreasuryRecord,
  BatchRecord,
  ExecutionRecord,
  BatchPayout,
  MovementStamp,
  RecipientRecord,
} from "./records.js";

type Conn = Knex | Knex.Transaction;

async function lock(trx: Knex.Transaction, partnerId: string): Promise<TreasuryRecord | undefined> {
  const row = await trx("treasuries").where({ partner_id: partnerId }).forUpdate().first();
  return row ? toTreasury(row) : undefined;
}

/**
 * The CTEs recordBatch puts before its batch insert: the paid items, the ledger's payout movement
 * over them and the events they raise: payout.executed to the payer, transfer.settled to each
 * partner entitled to read transfers that a recipient lets read them.
 */
function payoutStatement(b: BatchRecord, paid: BatchPayout): { sql: string; bindings: Knex.RawBinding[] } {
  const at = b.createdAt.toISOString();
  const ledger = payoutMovementCtes("items", { id: b.id, reference: `batch:${b.id}`, at: b.createdAt }, { partnerId: b.partnerId, currency: paid.currency });
  const events = enqueueCte(
    "payout_events",
    {
      sql: `SELECT 0::bigint AS n, ?::uuid AS partner_id, 'payout.executed' AS type, ?::jsonb AS data
            UNION ALL
            SELECT i.n, c.partner_id, 'transfer.settled',
                   jsonb_build_object('user_id', i.user_id, 'transfer_id', i.transfer_id, 'direction', 'credit',
                                      'amount_cents', i.amount_cents, 'currency', ?::text, 'status', 'settled',
                                      'created_at', ?::text, 'updated_at', ?::text)
              FROM items i JOIN consents c ON c.user_id = i.user_id AND 'transfers:read' = ANY (c.scopes)
              JOIN partners p ON p.id = c.partner_id AND 'transfers:read' = ANY (p.entitlements)`,
      bindings: [b.partnerId, JSON.stringify(paid.executedEvent), paid.currency, at, at],
    },
    b.createdAt,
  );
  return {
    sql: `items AS MATERIALIZED (
            SELECT i.n, i.execution_id, i.transfer_id, i.user_id, i.amount_cents
              FROM unnest(?::text[], ?::uuid[], ?::uuid[], ?::int8[]) WITH ORDINALITY AS i (execution_id, transfer_id, user_id, amount_cents, n)
          ),
          ${ledger.sql},
          ${events.sql},`,
    bindings: [
      paid.items.map((i) => i.executionId),
      paid.items.map((i) => payoutTransferId(b.partnerId, i.executionId)),
      paid.items.map((i) => i.recipientUserId),
      paid.items.map((i) => String(i.amountCents)),
      ...ledger.bindings,
      ...events.bindings,
    ],
  };
}

/** SQL for treasuries, batches and executions. */
export function createTreasuryStore(db: Db) {
  const users = createUsersStore();
  return {
    async find(partnerId: string, conn: Conn = db): Promise<TreasuryRecord | undefined> {
      const row = await conn("treasuries").where({ partner_id: partnerId }).first();
      return row ? toTreasury(row) : undefined;
    },

    /** Reads and locks the treasury until the transaction ends: batches on one treasury run one at a time. */
    lock,

    /**
     * Inserts or replaces the binding and books the balance difference as one treasury.bind movement.
     * A new treasury is inserted empty first, then locked and read, so the difference is computed from
     * a balance no concurrent fund, batch or bind can change before this transaction ends.
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
    async fund(
      trx: Knex.Transaction,
      locked: Pick<TreasuryRecord, "partnerId" | "currency">,
      amountCents: number,
      movement: MovementStamp,
    ): Promise<TreasuryRecord> {
      const ledger = movementCtes({
        ...movement,
        kind: "treasury.fund",
        reference: `treasury:${locked.partnerId}`,
        legs: fundLegs(locked.partnerId, locked.currency, amountCents),
      });
      const { rows } = await trx.raw(
        `WITH ${ledger.sql} UPDATE treasuries SET balance_cents = balance_cents + ?, updated_at = ? WHERE partner_id = ? RETURNING *`,
        [...ledger.bindings, amountCents, movement.at, locked.partnerId],
      );
      return toTreasury((rows as Record<string, unknown>[])[0]!);
    },

    async findBatch(partnerId: string, idempotencyKey: string, conn: Conn = db): Promise<BatchRecord | undefined> {
      const row = await conn("treasury_batches").where({ partner_id: partnerId, idempotency_key: idempotencyKey }).first();
      return row ? toBatch(row) : undefined;
    },

    /**
     * Records a batch, its debit and everything it newly paid (ledger legs, events) in one statement,
     * all derived from one item list so legs, events and debit cannot disagree; accounts open in id
     * order so concurrent batches never wait in a cycle. `inserted: false` if the key was taken meanwhile.
     */
    async recordBatch(
      trx: Knex.Transaction,
      b: BatchRecord,
      d: { amountCents: number; day: string; dayCents: number },
      payout?: BatchPayout,
    ): Promise<{ inserted: boolean }> {
      const paid = payout && payout.items.length > 0 ? payout : undefined;
      if ((paid?.items.reduce((sum, i) => sum + i.amountCents, 0) ?? 0) !== d.amountCents) throw new Error("the batch debit is not the sum of its paid items");
      const payoutCtes = paid ? payoutStatement(b, paid) : { sql: "", bindings: [] as Knex.RawBinding[] };
      const { rows } = await trx.raw(
        `WITH ${payoutCtes.sql}
         batch AS (
           INSERT INTO treasury_batches (id, partner_id, idempotency_key, request_hash, response, created_at)
           VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (partner_id, idempotency_key) DO NOTHING RETURNING partner_id
         )
         UPDATE treasuries t SET balance_cents = t.balance_cents - ?, spent_lifetime_cents = t.spent_lifetime_cents + ?,
                spent_day = ?, spent_day_cents = ?, updated_at = ?
           FROM batch WHERE t.partner_id = batch.partner_id
         RETURNING t.partner_id`,
        [
          ...payoutCtes.bindings,
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
     * Inserts a batch's executions, skipping ids this partner already used; returns the inserted ids.
     * A plain INSERT is tried first because ON CONFLICT costs as much again on every batch; the
     * partner's treasury lock keeps ids from being taken between the two. Each row is also a feed entry.
     */
    async insertExecutions(trx: Knex.Transaction, executions: ExecutionRecord[]): Promise<Set<string>> {
      if (executions.length === 0) return new Set();
      // unnest keeps the statement text and parameter count fixed whatever the batch size.
      const insert = `INSERT INTO treasury_executions (partner_id, execution_id, payout_id, batch_id, recipient_user_id, payer_entity_id,
                                                    amount_cents, currency, reference, executed_at, xid, seq, transfer_id)
         SELECT ?::uuid, e.execution_id, e.payout_id, ?::uuid, e.recipient_user_id, ?::uuid, e.amount_cents, e.currency, e.reference, ?::timestamptz,
                pg_current_xact_id(), ${NEXT_TRANSFER_SEQ_SQL}, e.transfer_id
           FROM unnest(?::text[], ?::text[], ?::uuid[], ?::int8[], ?::text[], ?::text[], ?::uuid[])
                AS e(execution_id, payout_id, recipient_user_id, amount_cents, currency, reference, transfer_id)`;
      const bindings = [
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
        executions.map((e) => payoutTransferId(e.partnerId, e.executionId)),
      ];
      await trx.raw(`SAVEPOINT treasury_executions`);
      try {
        await trx.raw(insert, bindings);
        return new Set(executions.map((e) => e.executionId));
      } catch (err) {
        if ((err as { code?: string }).code !== "23505") throw err;
      }
      await trx.raw(`ROLLBACK TO SAVEPOINT treasury_executions`);
      const { rows } = await trx.raw(`${insert} ON CONFLICT DO NOTHING RETURNING execution_id`, bindings);
      return new Set((rows as { execution_id: string }[]).map((r) => r.execution_id));
    },

    async findPayout(partnerId: string, userId: string, payoutId: string, conn: Conn = db): Promise<ExecutionRecord | undefined> {
      const row = await conn("treasury_executions").where({ partner_id: partnerId, payout_id: payoutId, recipient_user_id: userId }).first();
      return row ? toExecution(row) : undefined;
    },

    /**
     * The existing recipients among `userIds` with status and consent scopes, held FOR KEY SHARE
     * until the batch ends so a change to a user and the batch never interleave their writes.
     */
    async recipients(trx: Knex.Transaction, partnerId: string, userIds: string[]): Promise<RecipientRecord[]> {
      // Locked first, read after: a statement that waited for a lock still reads the consents
      // of the snapshot it began with, so a revocation committed meanwhile would go unseen.
      await users.holdUsers(trx, userIds);
      const { rows } = await trx.raw(
        `SELECT u.id AS user_id, u.status, coalesce(c.scopes, '{}') AS scopes
           FROM users u LEFT JOIN consents c ON c.user_id = u.id AND c.partner_id = ?
          WHERE u.id = ANY(?::uuid[])`,
        [partnerId, userIds],
      );
      return (rows as Record<string, unknown>[]).map((r) => ({
        userId: String(r.user_id),
        status: r.status as "active" | "inactive",
        scopes: textArray(r.scopes),
      }));
    },
  };
}

export type TreasuryStore = ReturnType<typeof createTreasuryStore>;
