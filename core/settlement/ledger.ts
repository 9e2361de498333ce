import { md5Uuid } from "../../lib/crypto.js";
import type { Knex } from "knex";
import { transactionExists } from "../ledger/reads.js";
import type { SettlementPayment } from "./records.js";
import type { SettlementHooks } from "./worker.js";

/**
 * The ledger side of settlement (migration 0031): accepted payments wait in
 * external:in_flight; a transfer deep enough moves them to the hot wallet's account, a
 * reorg moves them back, and a failure refunds the vault and its spend totals.
 */
export const IN_FLIGHT_ACCOUNT = "in_flight";
export const hotWalletAccount = (chain: string, wallet: string) => `hot_wallet:${chain}:${wallet.toLowerCase()}`;

/** A movement id derived from what it records, so a replay adds nothing. */
function movementId(...parts: string[]): string {
  return md5Uuid(parts.join(":"));
}

/**
 * How many reorgs took the payment's transfer back so far. Its n-th settle and n-th reorg are
 * movements of their own: a reorg can put a transfer back at the very height it left.
 */
async function reorgsOf(trx: Knex.Transaction, paymentId: string): Promise<number> {
  let n = 0;
  while (await transactionExists(trx, movementId("reorged", paymentId, String(n)))) n++;
  return n;
}

const utcDay = (d: Date) => d.toISOString().slice(0, 10);

/** Accepting a payment on the evm rail: vault -> in-flight, with the vault's balance and spend totals. */
export async function reservePayment(
  trx: Knex.Transaction,
  p: { vaultId: string; currency: string; paymentId: string; amountCents: number; at: Date },
): Promise<void> {
  await trx.raw(`SELECT vault_reserve_payment(?, ?, ?, ?, ?::date, ?)`, [p.vaultId, p.currency, p.paymentId, p.amountCents, utcDay(p.at), p.at]);
}

async function move(trx: Knex.Transaction, id: string, kind: string, p: SettlementPayment, from: string, to: string, at: Date) {
  await trx.raw(`SELECT settlement_move(?, ?, ?, ?, ?, ?, ?, ?)`, [id, kind, p.paymentId, from, to, p.amountCents, p.currency, at]);
}

/** A failed payment's refund into the vault it was paid from. */
export interface Refund {
  paymentId: string;
  vaultId: string;
  amountCents: number;
  currency: string;
  at: Date;
}

/**
 * What the room owning the vaults does around a refund, in its transaction: it takes its locks, then
 * runs `refund`, which answers false when the payment was refunded before (a replay moves nothing).
 */
export type AroundRefund = (trx: Knex.Transaction, r: Refund, refund: () => Promise<boolean>) => Promise<void>;

/** The refund itself: the vault's balance and spend totals, once per payment. */
async function refundOnce(trx: Knex.Transaction, p: SettlementPayment, vaultId: string, at: Date): Promise<boolean> {
  const id = movementId("refund", p.paymentId);
  if (await transactionExists(trx, id)) return false;
  await trx.raw(`SELECT settlement_refund(?, ?, ?, ?, ?, ?::date, ?)`, [id, vaultId, p.currency, p.paymentId, p.amountCents, utcDay(p.createdAt), at]);
  return true;
}

/**
 * Hooks that keep the books in step with each status change, plus `also` (audit records) after them;
 * a refund runs inside `aroundRefund` (core/budgets: into a closed budget, it follows the close up).
 */
export function settlementLedgerHooks(
  clock: () => Date,
  also?: (trx: Knex.Transaction, p: SettlementPayment, before: SettlementPayment) => Promise<void>,
  aroundRefund?: AroundRefund,
): SettlementHooks {
  return {
    async submitted(trx, p, before) {
      await also?.(trx, p, before);
    },
    async completed(trx, p, before) {
      await move(
        trx,
        movementId("settled", p.paymentId, String(await reorgsOf(trx, p.paymentId))),
        "payment.settle",
        p,
        IN_FLIGHT_ACCOUNT,
        hotWalletAccount(p.chain, p.wallet),
        clock(),
      );
      await also?.(trx, p, before);
    },
    async reorged(trx, p, before) {
      await move(
        trx,
        movementId("reorged", p.paymentId, String(await reorgsOf(trx, p.paymentId))),
        "payment.reorg",
        p,
        hotWalletAccount(p.chain, p.wallet),
        IN_FLIGHT_ACCOUNT,
        clock(),
      );
      await also?.(trx, p, before);
    },
    async failed(trx, p, before) {
      const vaultId = p.vaultId;
      if (vaultId) {
        const at = clock();
        const refund = () => refundOnce(trx, p, vaultId, at);
        if (aroundRefund) await aroundRefund(trx, { paymentId: p.paymentId, vaultId, amountCents: p.amountCents, currency: p.currency, at }, refund);
        else await refund();
      }
      await also?.(trx, p, before);
    },
  };
}
