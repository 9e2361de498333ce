/** The treasury room's records and how database rows become them. */

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

/**
 * What a batch paid: its newly executed items (in batch order) and the payer's
 * payout.executed event. Absent when the batch only reported already-executed items.
 */
export interface BatchPayout {
  currency: string;
  items: { executionId: string; recipientUserId: string; amountCents: number }[];
  /** The `data` of the paying partner's payout.executed event. */
  executedEvent: Record<string, unknown>;
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

const num = (v: unknown): number | null => (v == null ? null : Number(v));

export function toTreasury(r: Record<string, unknown>): TreasuryRecord {
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

export function toBatch(r: Record<string, unknown>): BatchRecord {
  return {
    id: String(r.id),
    partnerId: String(r.partner_id),
    idempotencyKey: String(r.idempotency_key),
    requestHash: String(r.request_hash),
    response: r.response as Uint8Array,
    createdAt: new Date(r.created_at as string | Date),
  };
}

export function toExecution(r: Record<string, unknown>): ExecutionRecord {
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
