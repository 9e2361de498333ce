import type { RailKind } from "./rules.js";

export type SettlementStatus = "pending" | "submitted" | "completed" | "failed";

export interface SettlementPayment {
  paymentId: string;
  vaultId: string | null;
  chain: string;
  rail: RailKind;
  /** The hot wallet's address in lower case ("sandbox" on the sandbox rail). */
  wallet: string;
  recipient: string;
  amountCents: number;
  currency: string;
  status: SettlementStatus;
  nonce: number | null;
  txHash: string | null;
  confirmations: number;
  minedBlock: number | null;
  minedBlockHash: string | null;
  failureReason: string | null;
  attempts: number;
  final: boolean;
  leaseToken: string | null;
  nextAttemptAt: Date;
  expiresAt: Date;
  createdAt: Date;
  updatedAt: Date;
  submittedAt: Date | null;
  completedAt: Date | null;
  /** Set when a reorg took back its completed transfer: it was paid once, so it is never cancelled for its expiry. */
  reorgedAt: Date | null;
}

export interface SignedTransaction {
  txHash: string;
  kind: "transfer" | "cancel";
  rawTx: string;
  maxFeePerGas: bigint;
  priorityFee: bigint;
  createdAt: Date;
}

export const COLUMNS = `payment_id, vault_id, chain, rail, wallet, recipient, amount_cents, currency, status, nonce, tx_hash, confirmations, mined_block,
  mined_block_hash, failure_reason, attempts, final, lease_token, next_attempt_at, expires_at, created_at, updated_at, submitted_at, completed_at, reorged_at`;

export function toPayment(r: Record<string, unknown>): SettlementPayment {
  const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  const date = (v: unknown) => (v === null || v === undefined ? null : new Date(v as string));
  return {
    paymentId: r.payment_id as string,
    vaultId: (r.vault_id as string | null) ?? null,
    chain: r.chain as string,
    rail: r.rail as RailKind,
    wallet: r.wallet as string,
    recipient: r.recipient as string,
    amountCents: Number(r.amount_cents),
    currency: r.currency as string,
    status: r.status as SettlementStatus,
    nonce: num(r.nonce),
    txHash: (r.tx_hash as string | null) ?? null,
    confirmations: Number(r.confirmations),
    minedBlock: num(r.mined_block),
    minedBlockHash: (r.mined_block_hash as string | null) ?? null,
    failureReason: (r.failure_reason as string | null) ?? null,
    attempts: Number(r.attempts),
    final: Boolean(r.final),
    leaseToken: (r.lease_token as string | null) ?? null,
    nextAttemptAt: date(r.next_attempt_at)!,
    expiresAt: date(r.expires_at)!,
    createdAt: date(r.created_at)!,
    updatedAt: date(r.updated_at)!,
    submittedAt: date(r.submitted_at),
    completedAt: date(r.completed_at),
    reorgedAt: date(r.reorged_at),
  };
}
