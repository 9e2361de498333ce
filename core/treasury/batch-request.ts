import { sha256Hex } from "../../lib/crypto.js";
import { hasControlCharacters, lengthBetween } from "../../lib/text.js";
import { UUID } from "../../lib/uuid.js";
import { isCurrencyCode, isPartnerId, PARTNER_ID_RULE } from "../../lib/vocabulary.js";

/** A batch item with amounts as numbers, after validation. */
export interface BatchItemInput {
  executionId: string;
  payoutId: string;
  recipientUserId: string;
  amountCents: number;
  currency: string;
  reference: string;
}

export interface BatchInput {
  idempotencyKey: string;
  payerEntityId: string;
  items: BatchItemInput[];
}

/** Wire-level shape before validation (int64 fields arrive as bigint). */
export interface RawBatch {
  idempotencyKey: string;
  payerEntityId: string;
  items: { executionId: string; payoutId: string; recipientUserId: string; amountCents: bigint; currency: string; reference: string }[];
}

export const MAX_IDEMPOTENCY_KEY = 255;
export const MAX_ITEMS = 1000;
export const MAX_REFERENCE = 140;

export type Validation = { ok: true; batch: BatchInput } | { ok: false; message: string };

/** Body validation, the first check of a batch. Messages name the field, never a value. */
export function validateBatch(raw: RawBatch): Validation {
  const bad = (message: string): Validation => ({ ok: false, message });
  const key = raw.idempotencyKey;
  if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY || !/^[\x21-\x7e]+$/.test(key)) {
    return bad(`Idempotency-Key is required: 1 to ${MAX_IDEMPOTENCY_KEY} visible ASCII characters`);
  }
  if (!UUID.test(raw.payerEntityId)) return bad("payer_entity_id must be a UUID");
  if (raw.items.length === 0 || raw.items.length > MAX_ITEMS) return bad(`items must hold 1 to ${MAX_ITEMS} payouts`);
  const executionIds = new Set<string>();
  const payoutIds = new Set<string>();
  let total = 0n;
  const items: BatchItemInput[] = [];
  for (const [i, item] of raw.items.entries()) {
    const at = `items[${i}]`;
    if (!isPartnerId(item.executionId)) return bad(`${at}.execution_id ${PARTNER_ID_RULE}`);
    if (!isPartnerId(item.payoutId)) return bad(`${at}.payout_id ${PARTNER_ID_RULE}`);
    if (!UUID.test(item.recipientUserId)) return bad(`${at}.recipient.user_id must be a UUID`);
    if (item.amountCents < 1n || item.amountCents > BigInt(Number.MAX_SAFE_INTEGER)) {
      return bad(`${at}.amount_cents must be an integer from 1 to ${Number.MAX_SAFE_INTEGER}`);
    }
    if (!isCurrencyCode(item.currency)) return bad(`${at}.currency must be an ISO 4217 code in upper case`);
    // Characters are code points; unpaired surrogates never get here (core's input guard).
    if (!lengthBetween(item.reference, 1, MAX_REFERENCE) || hasControlCharacters(item.reference)) {
      return bad(`${at}.reference must be 1 to ${MAX_REFERENCE} characters without control characters`);
    }
    if (executionIds.has(item.executionId)) return bad(`${at}.execution_id repeats an earlier item`);
    if (payoutIds.has(item.payoutId)) return bad(`${at}.payout_id repeats an earlier item`);
    executionIds.add(item.executionId);
    payoutIds.add(item.payoutId);
    total += item.amountCents;
    items.push({ ...item, recipientUserId: item.recipientUserId.toLowerCase(), amountCents: Number(item.amountCents) });
  }
  if (total > BigInt(Number.MAX_SAFE_INTEGER)) return bad(`the items' amounts must add up to at most ${Number.MAX_SAFE_INTEGER}`);
  return { ok: true, batch: { idempotencyKey: key, payerEntityId: raw.payerEntityId.toLowerCase(), items } };
}

/**
 * The request identity behind idempotency_conflict: a SHA-256 over a
 * canonical JSON of the batch with fixed key order. Item order counts; JSON
 * whitespace and key order in the original body do not.
 */
export function canonicalBatchHash(batch: Omit<BatchInput, "idempotencyKey">): string {
  const canonical = JSON.stringify([
    batch.payerEntityId,
    batch.items.map((i) => [i.executionId, i.payoutId, i.recipientUserId, i.amountCents, i.currency, i.reference]),
  ]);
  return sha256Hex(canonical);
}
