import { randomUUID } from "node:crypto";
import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import { pgArray } from "../db/sql.js";
import type { RailKind } from "./rules.js";
import { COLUMNS, toPayment, type SettlementPayment, type SettlementStatus, type SignedTransaction } from "./records.js";

type Conn = Knex | Knex.Transaction;

/** Runs inside the transaction that changes a payment's status, with the row as it now is. */
export type TransitionHook = (trx: Knex.Transaction, payment: SettlementPayment, before: SettlementPayment) => Promise<void>;

/** Why an unsigned payment is not to be signed: never (`stop`: cancelled and refunded), or not for now (`hold`). */
export type SignVerdict = "stop" | "hold";

/** The verdicts of the room owning these payments' vaults (read in `trx` when given); a payment it leaves out may be signed. */
export type SignCheck = (payments: readonly SettlementPayment[], trx?: Knex.Transaction) => Promise<ReadonlyMap<string, SignVerdict>>;

export interface NewSettlement {
  paymentId: string;
  /** The vault it was paid from (its refund goes back there). */
  vaultId?: string;
  chain: string;
  rail: RailKind;
  wallet: string;
  /** Stored in lower case on the evm rail: the spelling the chain reports, and viem encodes with no checksum to match. */
  recipient: string;
  amountCents: number;
  currency: string;
  at: Date;
  expiresAt: Date;
  /** The sandbox rail settles at once: its row is written completed. */
  status?: "pending" | "completed";
}

/** Fields a transition may set besides the status. */
export interface TransitionFields {
  txHash?: string;
  confirmations?: number;
  minedBlock?: number | null;
  minedBlockHash?: string | null;
  failureReason?: string | null;
  final?: boolean;
  completedAt?: Date | null;
  reorgedAt?: Date;
}

export type SubmitResult =
  | { kind: "lost" }
  | { kind: "stopped" }
  | { kind: "held" }
  | { kind: "underfunded"; availableUnits: bigint }
  | { kind: "no_gas"; neededWei: bigint }
  | { kind: "submitted"; payment: SettlementPayment; signed: SignedTransaction };

export function createSettlementStore(db: Db) {
  const fieldsSql = (f: TransitionFields, at: Date): { sql: string; bindings: Knex.RawBinding[] } => {
    const sets: string[] = ["updated_at = ?"];
    const bindings: Knex.RawBinding[] = [at];
    const add = (column: string, value: Knex.RawBinding | undefined) => {
      if (value === undefined) return;
      sets.push(`${column} = ?`);
      bindings.push(value);
    };
    add("tx_hash", f.txHash);
    add("confirmations", f.confirmations);
    add("mined_block", f.minedBlock);
    add("mined_block_hash", f.minedBlockHash);
    add("failure_reason", f.failureReason);
    add("final", f.final);
    add("completed_at", f.completedAt);
    add("reorged_at", f.reorgedAt);
    return { sql: sets.join(", "), bindings };
  };

  return {
    /** Records an accepted payment, in the transaction that accepts it. A second call for the same payment adds nothing. */
    async insert(trx: Conn, p: NewSettlement): Promise<void> {
      const status = p.status ?? "pending";
      await trx.raw(
        `INSERT INTO settlement_payments (payment_id, vault_id, chain, rail, wallet, recipient, amount_cents, currency, status, next_attempt_at, expires_at,
                                          created_at, updated_at, completed_at, final, confirmations)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (payment_id) DO NOTHING`,
        [
          p.paymentId,
          p.vaultId ?? null,
          p.chain,
          p.rail,
          p.wallet,
          p.rail === "evm" ? p.recipient.toLowerCase() : p.recipient,
          p.amountCents,
          p.currency,
          status,
          p.at,
          p.expiresAt,
          p.at,
          p.at,
          status === "completed" ? p.at : null,
          status === "completed",
        ],
      );
    },

    async get(conn: Conn, paymentId: string): Promise<SettlementPayment | undefined> {
      const { rows } = await conn.raw(`SELECT ${COLUMNS} FROM settlement_payments WHERE payment_id = ?`, [paymentId]);
      const r = (rows as Record<string, unknown>[])[0];
      return r ? toPayment(r) : undefined;
    },

    /**
     * Leases up to `limit` due payments no lease holds (skipping rows another claim locks): of these and the `watched` (retired) hot
     * wallets; or, `expiredUnsignedExcept`, the unsigned expired ones of every other wallet (node down, key replaced, chain on sandbox);
     * or, `unsignedIds`, those of these payments still pending and unsigned.
     */
    async claim(
      wallets: { chain: string; wallet: string }[],
      now: Date,
      leaseUntil: Date,
      limit: number,
      only: { expiredUnsignedExcept?: boolean; watched?: { chain: string; wallet: string }[]; unsignedIds?: readonly string[] } = {},
    ): Promise<SettlementPayment[]> {
      if (only.unsignedIds ? only.unsignedIds.length === 0 : wallets.length === 0 && !only.expiredUnsignedExcept) return [];
      const token = randomUUID();
      const pairs = (ws: { chain: string; wallet: string }[]) => [pgArray(ws.map((w) => w.chain)), pgArray(ws.map((w) => w.wallet))];
      const among = "(chain, wallet) IN (SELECT * FROM unnest(?::text[], ?::text[]))";
      const which = only.unsignedIds
        ? { sql: `payment_id = ANY(?::uuid[]) AND status = 'pending' AND nonce IS NULL`, bindings: [pgArray(only.unsignedIds)] }
        : only.expiredUnsignedExcept
          ? { sql: `NOT ${among} AND status = 'pending' AND nonce IS NULL AND expires_at <= ?`, bindings: [...pairs(wallets), now] }
          : { sql: `(${among} OR ${among})`, bindings: [...pairs(wallets), ...pairs(only.watched ?? [])] };
      const { rows } = await db.raw(
        `UPDATE settlement_payments s SET lease_token = ?, leased_until = ?
          WHERE s.payment_id IN (
            SELECT payment_id FROM settlement_payments
             WHERE status <> 'failed' AND NOT final AND next_attempt_at <= ? AND rail = 'evm'
               AND (leased_until IS NULL OR leased_until <= ?) AND ${which.sql}
             ORDER BY next_attempt_at LIMIT ? FOR UPDATE SKIP LOCKED)
          RETURNING ${COLUMNS}`,
        [token, leaseUntil, now, now, ...which.bindings, limit],
      );
      return (rows as Record<string, unknown>[]).map(toPayment);
    },

    /**
     * Up to `limit` pending unsigned payments no lease holds, of hot wallets other than these, after `after` by id:
     * a payment no core here can sign is still looked at for a close or revocation that stops it.
     */
    async unsignedElsewhere(wallets: { chain: string; wallet: string }[], now: Date, after: string, limit: number): Promise<SettlementPayment[]> {
      const { rows } = await db.raw(
        `SELECT ${COLUMNS} FROM settlement_payments
          WHERE status = 'pending' AND nonce IS NULL AND rail = 'evm' AND payment_id > ?::uuid AND (leased_until IS NULL OR leased_until <= ?)
            AND (chain, wallet) NOT IN (SELECT * FROM unnest(?::text[], ?::text[]))
          ORDER BY payment_id LIMIT ?`,
        [after, now, pgArray(wallets.map((w) => w.chain)), pgArray(wallets.map((w) => w.wallet)), limit],
      );
      return (rows as Record<string, unknown>[]).map(toPayment);
    },

    /** Hands a leased payment nothing was signed for to another hot wallet of its chain; undefined when it was signed or the lease passed. */
    async rehome(p: SettlementPayment, wallet: string, at: Date): Promise<SettlementPayment | undefined> {
      const { rows } = await db.raw(
        `UPDATE settlement_payments SET wallet = ?, updated_at = ? WHERE payment_id = ? AND lease_token = ? AND status = 'pending' AND nonce IS NULL
          RETURNING ${COLUMNS}`,
        [wallet, at, p.paymentId, p.leaseToken],
      );
      const r = (rows as Record<string, unknown>[])[0];
      return r ? toPayment(r) : undefined;
    },

    /** Gives a leased payment back, due again at `next`. False when the lease had passed to another worker. */
    async release(p: SettlementPayment, next: Date): Promise<boolean> {
      const { rowCount } = await db.raw(
        `UPDATE settlement_payments SET lease_token = NULL, leased_until = NULL, next_attempt_at = ? WHERE payment_id = ? AND lease_token = ?`,
        [next, p.paymentId, p.leaseToken],
      );
      return rowCount === 1;
    },

    /**
     * Nonce and signed transfer in one transaction under the wallet's nonce-row lock, stored before anything is sent. Refused when
     * USDC (less payments whose nonce that block had not used) or gas (`gasPerTransferWei` for this and each of those) cannot cover
     * it. `chainNonce` (that block's) also moves the counter on.
     */
    async submit(
      p: SettlementPayment,
      at: Date,
      chain: { balanceUnits: bigint; chainNonce: number; unitsOf(cents: number | bigint): bigint; gasWei: bigint; gasPerTransferWei: bigint },
      sign: (nonce: number) => Promise<Omit<SignedTransaction, "createdAt" | "kind">>,
      also: { hook?: TransitionHook; check?: SignCheck } = {},
    ): Promise<SubmitResult> {
      return db.transaction(async (trx) => {
        const { rows } = await trx.raw(`SELECT nonce FROM settlement_payments WHERE payment_id = ? AND lease_token = ? AND status = 'pending' FOR UPDATE`, [
          p.paymentId,
          p.leaseToken,
        ]);
        const row = (rows as { nonce: string | null }[])[0];
        if (!row) return { kind: "lost" } as const;
        // Under the payment's lock: a close or revocation committed before this is seen, and nothing is signed.
        const verdict = row.nonce === null ? (await also.check?.([p], trx))?.get(p.paymentId) : undefined;
        if (verdict) return { kind: verdict === "stop" ? "stopped" : "held" } as const;
        await trx.raw(`INSERT INTO settlement_nonces (chain, wallet, next_nonce) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, [
          p.chain,
          p.wallet,
          chain.chainNonce,
        ]);
        await trx.raw(`SELECT 1 FROM settlement_nonces WHERE chain = ? AND wallet = ? FOR UPDATE`, [p.chain, p.wallet]);
        let nonce = row.nonce === null ? null : Number(row.nonce);
        if (nonce === null) {
          const inFlight = await trx.raw(
            `SELECT coalesce(sum(amount_cents), 0)::text AS cents, count(*)::text AS n FROM settlement_payments
              WHERE chain = ? AND wallet = ? AND nonce >= ? AND status IN ('submitted', 'completed')`,
            [p.chain, p.wallet, chain.chainNonce],
          );
          const unmined = (inFlight.rows as { cents: string; n: string }[])[0]!;
          const available = chain.balanceUnits - chain.unitsOf(BigInt(unmined.cents));
          if (available < chain.unitsOf(p.amountCents)) return { kind: "underfunded", availableUnits: available } as const;
          const neededWei = (BigInt(unmined.n) + 1n) * chain.gasPerTransferWei;
          if (chain.gasWei < neededWei) return { kind: "no_gas", neededWei } as const;
          const taken = await trx.raw(
            `UPDATE settlement_nonces SET next_nonce = greatest(next_nonce, ?) + 1 WHERE chain = ? AND wallet = ? RETURNING next_nonce - 1 AS nonce`,
            [chain.chainNonce, p.chain, p.wallet],
          );
          nonce = Number((taken.rows as { nonce: string }[])[0]!.nonce);
        }
        const signed = { ...(await sign(nonce)), kind: "transfer" as const, createdAt: at };
        await insertTransaction(trx, p.paymentId, signed);
        const updated = await trx.raw(
          `UPDATE settlement_payments SET status = 'submitted', nonce = ?, tx_hash = ?, submitted_at = ?, updated_at = ?
            WHERE payment_id = ? RETURNING ${COLUMNS}`,
          [nonce, signed.txHash, at, at, p.paymentId],
        );
        const payment = toPayment((updated.rows as Record<string, unknown>[])[0]!);
        if (also.hook) await also.hook(trx, payment, p);
        return { kind: "submitted", payment, signed } as const;
      });
    },

    /** The next nonce this database would give the hot wallet's payments (undefined: no row yet). */
    async nextNonce(chain: string, wallet: string): Promise<number | undefined> {
      const { rows } = await db.raw(`SELECT next_nonce::text FROM settlement_nonces WHERE chain = ? AND wallet = ?`, [chain, wallet]);
      const next = (rows as { next_nonce: string }[])[0]?.next_nonce;
      return next === undefined ? undefined : Number(next);
    },

    /** Records the chain id a hot wallet pays on, unless one is recorded already; answers the recorded one. */
    async bindChainId(chain: string, wallet: string, chainId: number): Promise<number> {
      const { rows } = await db.raw(
        `INSERT INTO settlement_nonces (chain, wallet, next_nonce, chain_id) VALUES (?, ?, 0, ?)
         ON CONFLICT (chain, wallet) DO UPDATE SET chain_id = coalesce(settlement_nonces.chain_id, excluded.chain_id) RETURNING chain_id::text`,
        [chain, wallet, chainId],
      );
      return Number((rows as { chain_id: string }[])[0]!.chain_id);
    },

    /** The chain id a hot wallet was bound to when a core first verified it (undefined: never). */
    async boundChainId(chain: string, wallet: string): Promise<number | undefined> {
      const { rows } = await db.raw(`SELECT chain_id::text FROM settlement_nonces WHERE chain = ? AND wallet = ?`, [chain, wallet]);
      const id = (rows as { chain_id: string | null }[])[0]?.chain_id;
      return id === undefined || id === null ? undefined : Number(id);
    },

    /** Stores another signed transaction for a submitted payment (a fee bump or a cancellation, same nonce). */
    async addTransaction(p: SettlementPayment, signed: SignedTransaction): Promise<boolean> {
      return db.transaction(async (trx) => {
        const { rows } = await trx.raw(
          `UPDATE settlement_payments SET updated_at = ?${signed.kind === "transfer" ? ", tx_hash = ?" : ""}
            WHERE payment_id = ? AND lease_token = ? AND status = 'submitted' RETURNING payment_id`,
          signed.kind === "transfer" ? [signed.createdAt, signed.txHash, p.paymentId, p.leaseToken] : [signed.createdAt, p.paymentId, p.leaseToken],
        );
        if ((rows as unknown[]).length === 0) return false;
        await insertTransaction(trx, p.paymentId, signed);
        return true;
      });
    },

    /** Every transaction signed for a payment, oldest first. */
    async transactions(paymentId: string): Promise<SignedTransaction[]> {
      const { rows } = await db.raw(
        `SELECT tx_hash, kind, raw_tx, max_fee_per_gas::text, priority_fee::text, created_at FROM settlement_transactions WHERE payment_id = ? ORDER BY created_at, tx_hash`,
        [paymentId],
      );
      return (rows as Record<string, string>[]).map((r) => ({
        txHash: r.tx_hash!,
        kind: r.kind as "transfer" | "cancel",
        rawTx: r.raw_tx!,
        maxFeePerGas: BigInt(r.max_fee_per_gas!),
        priorityFee: BigInt(r.priority_fee!),
        createdAt: new Date(r.created_at!),
      }));
    },

    /**
     * Moves a leased payment from one status to another (or updates it in place when `to`
     * equals `from`), and runs `hook` in the same transaction when the status changed.
     * Answers the row as it now is, or undefined when the lease had passed on.
     */
    async transition(p: SettlementPayment, from: SettlementStatus, to: SettlementStatus, at: Date, fields: TransitionFields, hook?: TransitionHook) {
      return db.transaction(async (trx) => {
        const set = fieldsSql(fields, at);
        const { rows } = await trx.raw(
          `UPDATE settlement_payments SET status = ?, ${set.sql} WHERE payment_id = ? AND lease_token = ? AND status = ? RETURNING ${COLUMNS}`,
          [to, ...set.bindings, p.paymentId, p.leaseToken, from],
        );
        const r = (rows as Record<string, unknown>[])[0];
        if (!r) return undefined;
        const payment = toPayment(r);
        if (to !== from && hook) await hook(trx, payment, p);
        return payment;
      });
    },

    /** Per chain, when the longest-overdue open payment expired (open past its expiry at `now`): the metrics scrape. */
    async oldestOverdue(now: Date): Promise<{ chain: string; expiresAt: Date }[]> {
      const { rows } = await db.raw(
        `SELECT chain, min(expires_at) AS expires_at FROM settlement_payments
          WHERE status IN ('pending', 'submitted') AND NOT final AND rail = 'evm' AND expires_at <= ? GROUP BY chain`,
        [now],
      );
      return (rows as { chain: string; expires_at: string }[]).map((r) => ({ chain: r.chain, expiresAt: new Date(r.expires_at) }));
    },

    /** Payments waiting to settle (pending, submitted) per chain and status: the metrics scrape. */
    async openCounts(): Promise<{ chain: string; status: SettlementStatus; count: number }[]> {
      const { rows } = await db.raw(
        `SELECT chain, status, count(*)::int AS count FROM settlement_payments WHERE status IN ('pending', 'submitted') AND NOT final GROUP BY chain, status`,
      );
      return (rows as { chain: string; status: SettlementStatus; count: number }[]).map((r) => ({ ...r, count: Number(r.count) }));
    },
  };
}

async function insertTransaction(trx: Knex.Transaction, paymentId: string, s: SignedTransaction): Promise<void> {
  await trx.raw(
    `INSERT INTO settlement_transactions (tx_hash, payment_id, kind, raw_tx, max_fee_per_gas, priority_fee, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (tx_hash) DO NOTHING`,
    [s.txHash, paymentId, s.kind, s.rawTx, s.maxFeePerGas.toString(), s.priorityFee.toString(), s.createdAt],
  );
}

export type SettlementStore = ReturnType<typeof createSettlementStore>;
