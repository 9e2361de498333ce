import { BATCH_BODY_LIMIT, MAX_IDEMPOTENCY_KEY } from "./treasury-wire.js";

/**
 * The treasury paths and schemas of the partner OpenAPI 3.1 document (DESIGN 4.3),
 * merged into the served document. `errorResponse(status, codes)` comes from the
 * document so every error shares its envelope schema.
 */
export function treasuryOpenApi(errorResponse: (description: string, codes: string[]) => Record<string, unknown>) {
  const uuid = { type: "string", format: "uuid" };
  const int53 = { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER };
  const partnerId = { type: "string", minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9._:~-]+$" };
  const dateTime = { type: "string", format: "date-time" };
  const bearer = [{ partnerBearer: [] }];

  const schemas = {
    Treasury: {
      type: "object",
      additionalProperties: false,
      required: ["status", "payer_entity_id", "currency", "available_cents"],
      properties: {
        status: { enum: ["active", "suspended", "disabled", "mandate_expired"] },
        payer_entity_id: uuid,
        currency: { type: "string", pattern: "^[A-Z]{3}$" },
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
              currency: { type: "string", pattern: "^[A-Z]{3}$" },
              reference: { type: "string", minLength: 1, maxLength: 140 },
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

  const json = (ref: string) => ({ "application/json": { schema: { $ref: `#/components/schemas/${ref}` } } });
  const common = {
    "401": errorResponse("Missing, expired or unverifiable bearer token", ["invalid_token"]),
    "429": errorResponse("Over the per-operation rate limit", ["rate_limited"]),
    "500": errorResponse("Unhandled server error", ["internal_error"]),
    "503": errorResponse("Verification keys or audit persistence unavailable", ["auth_unavailable", "audit_unavailable"]),
  };

  const paths = {
    "/treasury": {
      get: {
        operationId: "getTreasury",
        summary: "The partner's treasury (treasury:write)",
        security: bearer,
        responses: {
          "200": { description: "Treasury", content: json("Treasury") },
          "403": errorResponse("Token lacks treasury:write, or partner suspended", ["grant_required", "partner_inactive"]),
          "404": errorResponse("No treasury bound to the partner", ["treasury_not_configured"]),
          ...common,
        },
      },
    },
    "/treasury/payouts": {
      post: {
        operationId: "executeTreasuryBatch",
        summary: "Pay a batch all-or-nothing, idempotent on Idempotency-Key (treasury:write)",
        description:
          `Body at most ${BATCH_BODY_LIMIT} bytes. The same Idempotency-Key with the same body (item order counts) returns ` +
          "the original 200 body; with a different body, 409 idempotency_conflict. Rejections consume no execution ids.",
        security: bearer,
        parameters: [
          { name: "Idempotency-Key", in: "header", required: true, schema: { type: "string", minLength: 1, maxLength: MAX_IDEMPOTENCY_KEY } },
        ],
        requestBody: { required: true, content: json("BatchRequest") },
        responses: {
          "200": { description: "Batch executed (or replayed)", content: json("Batch") },
          "400": errorResponse("Invalid body, missing Idempotency-Key, or unparseable JSON", ["invalid_request", "invalid_json"]),
          "403": errorResponse("Refused by scope, treasury state, payer, consent or a limit", [
            "grant_required",
            "partner_inactive",
            "treasury_inactive",
            "payer_not_allowed",
            "policy_denied",
            "user_inactive",
          ]),
          "404": errorResponse("No treasury bound to the partner", ["treasury_not_configured"]),
          "409": errorResponse("Funds, idempotency or execution conflict", ["insufficient_funds", "idempotency_conflict", "execution_conflict"]),
          "413": errorResponse("Body over 64 KiB", ["body_too_large"]),
          ...common,
        },
      },
    },
    "/users/{user_id}/payouts/{payout_id}": {
      get: {
        operationId: "getPayoutReceipt",
        summary: "A payout receipt (payouts:receive)",
        security: bearer,
        parameters: [
          { name: "user_id", in: "path", required: true, schema: uuid },
          { name: "payout_id", in: "path", required: true, schema: partnerId },
        ],
        responses: {
          "200": { description: "Payout receipt", content: json("PayoutReceipt") },
          "400": errorResponse("Malformed user or payout id", ["invalid_request"]),
          "403": errorResponse("No payouts:receive grant, or user or partner inactive", ["grant_required", "user_inactive", "partner_inactive"]),
          "404": errorResponse("User unknown to the partner, or no such payout", ["user_not_found", "not_found"]),
          ...common,
        },
      },
    },
  };
  return { paths, schemas };
}
