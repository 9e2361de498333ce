import { CURRENCY_PATTERN } from "../../lib/vocabulary.js";

/** The event kinds of the partner feed and webhooks, each with the schema of its `data`. */
const EVENT_DATA = {
  "kyc.status_changed": "KycStatus",
  "transfer.settled": "TransferEventData",
  "transfer.failed": "TransferEventData",
  "payout.executed": "PayoutExecutedData",
} as const;

/** Component name of one kind's variant: `payout.executed` -> `PayoutExecutedEvent` (or `...Webhook`). */
const variantName = (type: string, suffix: string) =>
  type
    .split(/[._]/)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join("") + suffix;

/**
 * The schemas of `Event` (GET /events) and `WebhookPayload` (deliveries): one variant per kind,
 * told apart by `type`, so a client's generated types know each kind's `data`.
 */
export function eventSchemas(ref: (name: string) => unknown, transfer: { required: string[]; properties: Record<string, unknown> }) {
  const uuid = { type: "string", format: "uuid" };
  const dateTime = { type: "string", format: "date-time" };
  const int53 = { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER };
  const partnerId = { type: "string", minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9._:~-]+$" };
  const types = Object.keys(EVENT_DATA) as (keyof typeof EVENT_DATA)[];
  const schemas: Record<string, unknown> = {
    TransferEventData: {
      type: "object",
      description: "a transfer of the user, as GET /users/{user_id}/transfers lists it, with its user_id",
      required: ["user_id", ...transfer.required],
      properties: { user_id: uuid, ...transfer.properties },
      additionalProperties: false,
    },
    PayoutExecutedData: {
      type: "object",
      description: "one treasury batch's newly executed payouts (already executed items are not repeated)",
      required: ["batch_id", "payer_entity_id", "currency", "total_cents", "executed_at", "payouts"],
      properties: {
        batch_id: uuid,
        payer_entity_id: uuid,
        currency: { type: "string", pattern: CURRENCY_PATTERN },
        total_cents: int53,
        executed_at: dateTime,
        payouts: {
          type: "array",
          minItems: 1,
          items: {
            type: "object",
            required: ["payout_id", "execution_id", "user_id", "amount_cents", "reference"],
            properties: { payout_id: partnerId, execution_id: partnerId, user_id: uuid, amount_cents: int53, reference: { type: "string" } },
            additionalProperties: false,
          },
        },
      },
      additionalProperties: false,
    },
  };
  const union = (suffix: string) => ({
    oneOf: types.map((t) => ref(variantName(t, suffix))),
    discriminator: { propertyName: "type", mapping: Object.fromEntries(types.map((t) => [t, `#/components/schemas/${variantName(t, suffix)}`])) },
  });
  for (const t of types) {
    schemas[variantName(t, "Event")] = {
      type: "object",
      required: ["event_id", "type", "created_at", "data"],
      properties: { event_id: uuid, type: { const: t }, created_at: dateTime, data: ref(EVENT_DATA[t]) },
      additionalProperties: false,
    };
    schemas[variantName(t, "Webhook")] = {
      type: "object",
      required: ["type", "timestamp", "data"],
      properties: { type: { const: t }, timestamp: dateTime, data: ref(EVENT_DATA[t]) },
      additionalProperties: false,
    };
  }
  schemas.Event = union("Event");
  schemas.WebhookPayload = union("Webhook");
  return schemas;
}
