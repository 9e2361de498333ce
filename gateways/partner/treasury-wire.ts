import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ItemStatus, TreasuryStatus, type Batch, type BatchItemSchema, type Payout, type Treasury } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";

/** The batch body limit. */
export const BATCH_BODY_LIMIT = 64 * 1024;
/** A missing or longer Idempotency-Key is invalid_request. */
export const MAX_IDEMPOTENCY_KEY = 255;

export type ParsedBatch = { ok: true; payerEntityId: string; items: MessageInitShape<typeof BatchItemSchema>[] } | { ok: false; message: string };

const BATCH_KEYS = ["payer_entity_id", "items"];
const ITEM_KEYS = ["execution_id", "payout_id", "recipient", "amount_cents", "currency", "reference"];

/**
 * The batch body's shape: exact keys (unknown fields are 400), JSON types.
 * Ranges and formats are core's (body validation), so every caller gets them.
 */
export function parseBatchBody(body: unknown): ParsedBatch {
  const bad = (message: string): ParsedBatch => ({ ok: false, message });
  if (!isObject(body)) return bad("body must be a JSON object");
  const keyProblem = exactKeys(body, BATCH_KEYS, "");
  if (keyProblem) return bad(keyProblem);
  if (typeof body.payer_entity_id !== "string") return bad("payer_entity_id must be a string");
  if (!Array.isArray(body.items)) return bad("items must be an array");
  const items: MessageInitShape<typeof BatchItemSchema>[] = [];
  for (const [i, item] of body.items.entries()) {
    const at = `items[${i}]`;
    if (!isObject(item)) return bad(`${at} must be an object`);
    const itemProblem = exactKeys(item, ITEM_KEYS, `${at}.`);
    if (itemProblem) return bad(itemProblem);
    for (const key of ["execution_id", "payout_id", "currency", "reference"] as const) {
      if (typeof item[key] !== "string") return bad(`${at}.${key} must be a string`);
    }
    if (!isObject(item.recipient)) return bad(`${at}.recipient must be an object`);
    const recipientProblem = exactKeys(item.recipient, ["user_id"], `${at}.recipient.`);
    if (recipientProblem) return bad(recipientProblem);
    if (typeof item.recipient.user_id !== "string") return bad(`${at}.recipient.user_id must be a string`);
    const amount = item.amount_cents;
    if (typeof amount !== "number" || !Number.isSafeInteger(amount)) return bad(`${at}.amount_cents must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}`);
    items.push({
      executionId: item.execution_id as string,
      payoutId: item.payout_id as string,
      recipientUserId: item.recipient.user_id,
      amountCents: BigInt(amount),
      currency: item.currency as string,
      reference: item.reference as string,
    });
  }
  return { ok: true, payerEntityId: body.payer_entity_id, items };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function exactKeys(v: Record<string, unknown>, allowed: string[], prefix: string): string | undefined {
  const unknown = Object.keys(v).find((k) => !allowed.includes(k));
  if (unknown !== undefined) return `unknown field: ${prefix}${unknown}`;
  const missing = allowed.find((k) => !Object.hasOwn(v, k));
  if (missing !== undefined) return `${prefix}${missing} is required`;
  return undefined;
}

const iso = (t: Timestamp | undefined) => (t ? timestampDate(t).toISOString() : null);

const itemStatus = {
  [ItemStatus.UNSPECIFIED]: "unspecified",
  [ItemStatus.EXECUTED]: "executed",
  [ItemStatus.ALREADY_EXECUTED]: "already_executed",
} satisfies Record<ItemStatus, string>;

const treasuryStatus = {
  [TreasuryStatus.UNSPECIFIED]: "unspecified",
  [TreasuryStatus.ACTIVE]: "active",
  [TreasuryStatus.SUSPENDED]: "suspended",
  [TreasuryStatus.DISABLED]: "disabled",
  [TreasuryStatus.MANDATE_EXPIRED]: "mandate_expired",
} satisfies Record<TreasuryStatus, string>;

/** The batch answer; key order fixed, so a replayed batch renders the same bytes. */
export function renderBatch(b: Batch) {
  return {
    batch_id: b.batchId,
    payer_entity_id: b.payerEntityId,
    total_cents: Number(b.totalCents),
    items: b.items.map((i) => ({ execution_id: i.executionId, payout_id: i.payoutId, status: itemStatus[i.status], executed_at: iso(i.executedAt) })),
    created_at: iso(b.createdAt),
  };
}

/** `GET /treasury`. */
export function renderTreasury(t: Treasury) {
  return { status: treasuryStatus[t.status], payer_entity_id: t.payerEntityId, currency: t.currency, available_cents: Number(t.availableCents) };
}

/** A payout receipt. */
export function renderPayout(p: Payout) {
  return {
    payout_id: p.payoutId,
    execution_id: p.executionId,
    batch_id: p.batchId,
    user_id: p.userId,
    amount_cents: Number(p.amountCents),
    currency: p.currency,
    reference: p.reference,
    status: p.status,
    executed_at: iso(p.executedAt),
  };
}
