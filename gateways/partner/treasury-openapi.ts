import { BATCH_BODY_LIMIT, MAX_IDEMPOTENCY_KEY } from "./treasury-wire.js";
import { CURRENCY_PATTERN } from "../../lib/vocabulary.js";

/** Helpers of the partner document (gateways/partner/openapi.ts), so treasury paths share its envelope. */
export interface OpenApiHelpers {
  ref(name: string): unknown;
  json(schema: unknown, description: string, extraHeaders?: Record<string, unknown>): unknown;
  /** The common resource error responses plus the given statuses. */
  errors(...statuses: string[]): Record<string, unknown>;
}

/** The treasury paths and schemas of the partner OpenAPI 3.1 document. */
export function treasuryOpenApi(h: OpenApiHelpers) {
  const uuid = { type: "string", format: "uuid" };
  const int53 = { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER };
  const partnerId = { type: "string", minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9._:~-]+$" };
  const dateTime = { type: "string", format: "date-time" };
  const bearer = [{ bearer: [] }];

  const schemas = {
    Treasury: {
      type: "object",
      additionalProperties: false,
      required: ["status", "payer_entity_id", "currency", "available_cents"],
      properties: {
        status: { enum: ["active", "suspended", "disabled", "mandate_expired"] },
        payer_entity_id: uuid,
        currency: { type: "string", pattern: CURRENCY_PATTERN },
        available_cents: int53,
      },
    },
    BatchRequest: {
      type: "object",
      additionalProperties: false,
      required: ["payer_entity_id", "items"],
      properties: {
        payer_entity_id: uuid,
        items: {
          type: "array",
          minItems: 1,
          maxItems: 1000,
          items: {
            type: "object",
            additionalProperties: false,
            required: ["execution_id", "payout_id", "recipient", "amount_cents", "currency", "reference"],
            properties: {
              execution_id: partnerId,
              payout_id: partnerId,
              recipient: { type: "object", additionalProperties: false, required: ["user_id"], properties: { user_id: uuid } },
              amount_cents: { ...int53, minimum: 1 },
              currency: { type: "string", pattern: CURRENCY_PATTERN },
              reference: { type: "string", minLength: 1, maxLength: 140, pattern: "^\\P{Cc}+$" },
            },
          },
        },
      },
    },
    Batch: {
      type: "object",
      additionalProperties: false,
      required: ["batch_id", "payer_entity_id", "total_cents", "items", "created_at"],
      properties: {
        batch_id: uuid,
        payer_entity_id: uuid,
        total_cents: { ...int53, description: "What this batch debited: the sum of its newly executed items." },
        items: {
          type: "array",
          items: {
            type: "object",
            additionalProperties: false,
            required: ["execution_id", "payout_id", "status", "executed_at"],
            properties: {
              execution_id: partnerId,
              payout_id: partnerId,
              status: { enum: ["executed", "already_executed"] },
              executed_at: dateTime,
            },
          },
        },
        created_at: dateTime,
      },
    },
    PayoutReceipt: {
      type: "object",
      additionalProperties: false,
      required: ["payout_id", "execution_id", "batch_id", "user_id", "amount_cents", "currency", "reference", "status", "executed_at"],
      properties: {
        payout_id: partnerId,
        execution_id: partnerId,
        batch_id: uuid,
        user_id: uuid,
        amount_cents: int53,
        currency: { type: "string" },
        reference: { type: "string" },
        status: { enum: ["executed"] },
        executed_at: dateTime,
      },
    },
  };

  const paths = {
    "/treasury": {
      get: {
        operationId: "getTreasury",
        summary: "The partner's treasury (token scope treasury:write)",
        security: bearer,
        responses: { "200": h.json(h.ref("Treasury"), "treasury"), ...h.errors("404") },
      },
    },
    "/treasury/payouts": {
      post: {
        operationId: "executeTreasuryBatch",
        summary: "Pay a batch all-or-nothing, idempotent on Idempotency-Key (token scope treasury:write)",
        description:
          `Body at most ${BATCH_BODY_LIMIT} bytes. The same Idempotency-Key with the same body (item order counts) returns ` +
          "the original 200 body byte for byte; with a different body, 409 idempotency_conflict. Rejections execute nothing " +
          "and consume no execution ids. Recipients need payouts:receive consent. See docs/reference/treasury.md for the check order.",
        security: bearer,
        parameters: [
          {
            name: "Idempotency-Key",
            in: "header",
            required: true,
            schema: { type: "string", minLength: 1, maxLength: MAX_IDEMPOTENCY_KEY, pattern: "^[\\x21-\\x7e]+$" },
          },
        ],
        requestBody: { required: true, content: { "application/json": { schema: h.ref("BatchRequest") } } },
        responses: {
          "200": h.json(h.ref("Batch"), "batch executed, or the replay of the first answer for this key", {
            "Idempotent-Replayed": { description: "present on a replay", required: false, schema: { const: "true" } },
          }),
          ...h.errors("404", "409", "413", "415"),
        },
      },
    },
    "/users/{user_id}/payouts/{payout_id}": {
      get: {
        operationId: "getPayoutReceipt",
        summary: "A payout receipt (payouts:receive in the token and the user's consent)",
        security: bearer,
        parameters: [
          { name: "user_id", in: "path", required: true, schema: uuid },
          { name: "payout_id", in: "path", required: true, schema: partnerId },
        ],
        responses: { "200": h.json(h.ref("PayoutReceipt"), "payout receipt"), ...h.errors("404") },
      },
    },
  };
  return { paths, schemas };
}
