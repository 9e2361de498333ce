/**
 * The OpenAPI 3.1 document of the partner API (served at GET /api/partner/openapi.json).
 * Tests validate real responses against it, so it must say exactly what the routes send.
 */

import { treasuryOpenApi } from "./treasury-openapi.js";
import { eventSchemas } from "./events-openapi.js";
import { EMAIL_PATTERN } from "../../lib/email.js";
import { SCOPE_PATTERN } from "../../lib/scopes.js";
import { PARTNER_URL_PATTERN } from "../../lib/partner-urls.js";
import { CHAINS, CURRENCY_PATTERN, KYC_STATUSES } from "../../lib/vocabulary.js";
import { RESOURCE_ERROR_CODES } from "./resource-envelope.js";

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const resp = (name: string) => ({ $ref: `#/components/responses/${name}` });
const dateTime = { type: "string", format: "date-time" };
const uuid = { type: "string", format: "uuid" };
const TRANSFER = {
  type: "object",
  required: ["transfer_id", "direction", "amount_cents", "currency", "status", "created_at", "updated_at"],
  properties: {
    transfer_id: uuid,
    direction: { enum: ["credit", "debit"] },
    amount_cents: { type: "integer", minimum: 0, maximum: 9007199254740991 },
    currency: { type: "string", pattern: CURRENCY_PATTERN },
    status: { enum: ["pending", "settled", "failed"] },
    created_at: dateTime,
    updated_at: dateTime,
  },
  additionalProperties: false,
};
const requestIdHeader = { "X-Request-Id": { $ref: "#/components/headers/RequestId" } };

const resourceErrors = (...codes: string[]) => Object.fromEntries(codes.map((c) => [c, resp(`E${c}`)]));
const common = ["400", "401", "403", "429", "431", "500", "503"];

function json(schema: unknown, description: string, extraHeaders: Record<string, unknown> = {}) {
  return { description, headers: { ...requestIdHeader, ...extraHeaders }, content: { "application/json": { schema } } };
}

const userIdParam = { name: "user_id", in: "path", required: true, schema: uuid };
const pageParams = [
  { name: "limit", in: "query", required: false, schema: { type: "integer", minimum: 1, maximum: 100, default: 50 } },
  { name: "cursor", in: "query", required: false, schema: { type: "string", maxLength: 1024 }, description: "opaque, server-signed; from next_cursor" },
  { name: "since", in: "query", required: false, schema: { type: "string", maxLength: 1024 }, description: "a saved watermark; rows strictly after it" },
];

export function partnerOpenApi(serverUrl: string) {
  const treasury = treasuryOpenApi({ ref, json, errors: (...statuses) => resourceErrors(...common, ...statuses) });
  return {
    openapi: "3.1.0",
    info: {
      title: "Vaultgate partner API",
      version: "1.0.0",
      description: "Consent-gated access to users' financial resources for partners (client_credentials, ES256 bearer tokens).",
    },
    servers: [{ url: serverUrl }],
    security: [{ bearer: [] }],
    paths: {
      "/oauth/token": {
        post: {
          operationId: "issueToken",
          summary: "Mint a one-hour partner access token (client_credentials)",
          security: [{ basic: [] }, {}],
          requestBody: {
            required: true,
            content: {
              "application/x-www-form-urlencoded": {
                schema: {
                  type: "object",
                  required: ["grant_type"],
                  properties: {
                    grant_type: { const: "client_credentials" },
                    scope: {
                      type: "string",
                      pattern: SCOPE_PATTERN,
                      description: "Scope names separated by single spaces; omitted or empty asks for every entitlement, only spaces is invalid_scope",
                    },
                    client_id: { type: "string" },
                    client_secret: { type: "string" },
                  },
                  // RFC 6749 3.2: the token endpoint ignores parameters it does not know.
                  additionalProperties: true,
                },
              },
            },
          },
          responses: {
            "200": {
              description: "token issued",
              headers: { ...requestIdHeader, "Cache-Control": { schema: { const: "no-store" } }, Pragma: { schema: { const: "no-cache" } } },
              content: { "application/json": { schema: ref("TokenResponse") } },
            },
            "400": {
              description: "invalid_request, unsupported_grant_type or invalid_scope",
              headers: requestIdHeader,
              content: { "application/json": { schema: ref("OAuthError") } },
            },
            "401": {
              description: "invalid_client (unknown client or wrong secret)",
              headers: { ...requestIdHeader, "WWW-Authenticate": { schema: { type: "string" } } },
              content: { "application/json": { schema: ref("OAuthError") } },
            },
            "403": {
              description: "invalid_client: suspended or pending client",
              headers: requestIdHeader,
              content: { "application/json": { schema: ref("OAuthError") } },
            },
            "415": {
              description: "invalid_request: a Content-Encoding other than identity",
              headers: { ...requestIdHeader, "Accept-Encoding": { schema: { const: "identity" } } },
              content: { "application/json": { schema: ref("OAuthError") } },
            },
            "429": {
              description: "rate_limited",
              headers: { ...requestIdHeader, "Retry-After": { schema: { const: "60" } } },
              content: { "application/json": { schema: ref("OAuthError") } },
            },
            "500": { description: "server_error", headers: requestIdHeader, content: { "application/json": { schema: ref("OAuthError") } } },
            "503": { description: "temporarily_unavailable", headers: requestIdHeader, content: { "application/json": { schema: ref("OAuthError") } } },
          },
        },
      },
      "/users": {
        post: {
          operationId: "preCreateUser",
          summary: "Create (or find) a user for an e-mail; idempotent per partner and e-mail",
          requestBody: { required: true, content: { "application/json": { schema: ref("PreCreateRequest") } } },
          responses: {
            "201": json(ref("PreCreateResponse"), "this partner's first pre-create of the e-mail"),
            "200": json(ref("PreCreateResponse"), "repeat: same user_id, created false"),
            ...resourceErrors(...common, "413", "415"),
          },
        },
      },
      "/users/{user_id}/kyc": {
        get: {
          operationId: "getKycStatus",
          summary: "Verification status (kyc:read)",
          parameters: [userIdParam],
          responses: { "200": json(ref("KycStatus"), "verification status"), ...resourceErrors(...common, "404") },
        },
      },
      "/users/{user_id}/kyc/link": {
        post: {
          operationId: "createKycLink",
          summary: "Hosted verification link (kyc:read)",
          parameters: [userIdParam],
          requestBody: { required: false, content: { "application/json": { schema: ref("KycLinkRequest") } } },
          responses: { "201": json(ref("KycLink"), "hosted link"), ...resourceErrors(...common, "404", "409", "413", "415") },
        },
      },
      "/users/{user_id}/wallets": {
        get: {
          operationId: "listWallets",
          summary: "EVM and Solana public addresses (wallet:read)",
          parameters: [userIdParam],
          responses: { "200": json(ref("Wallets"), "wallets"), ...resourceErrors(...common, "404") },
        },
      },
      "/users/{user_id}/us-account": {
        get: {
          operationId: "getUsAccount",
          summary: "Provisioned USD receiving details (us_account:read)",
          parameters: [userIdParam],
          responses: { "200": json(ref("UsAccount"), "US account details"), ...resourceErrors(...common, "404") },
        },
      },
      "/users/{user_id}/transfers": {
        get: {
          operationId: "listTransfers",
          summary: "Personal ledger history (transfers:read)",
          parameters: [userIdParam, ...pageParams],
          responses: { "200": json(ref("TransferPage"), "one page of transfers"), ...resourceErrors(...common, "404") },
        },
      },
      "/events": {
        get: {
          operationId: "listEvents",
          summary: "Events for this partner (any valid token; each kind only with its scope in the token)",
          parameters: pageParams,
          responses: { "200": json(ref("EventPage"), "one page of events"), ...resourceErrors(...common) },
        },
      },
      ...treasury.paths,
      "/openapi.json": {
        get: {
          operationId: "getOpenApi",
          summary: "This document",
          security: [],
          responses: {
            "200": { description: "OpenAPI 3.1 document", headers: requestIdHeader, content: { "application/json": { schema: { type: "object" } } } },
          },
        },
      },
    },
    webhooks: {
      partnerEvent: {
        post: {
          summary: "Event delivery (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature v1 HMAC-SHA256)",
          requestBody: { content: { "application/json": { schema: ref("WebhookPayload") } } },
          responses: { "200": { description: "any 2xx acknowledges; anything else is retried with exponential backoff" } },
        },
      },
    },
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT" },
        basic: { type: "http", scheme: "basic" },
      },
      headers: {
        RequestId: { description: "UUID of this request; equals error.request_id and the audit record", required: true, schema: uuid },
      },
      responses: Object.fromEntries(
        [
          ["400", "invalid_request, invalid_json or invalid_cursor", {}],
          ["401", "invalid_token", { "WWW-Authenticate": { required: true, schema: { type: "string", pattern: "^Bearer" } } }],
          ["403", "grant_required, partner_inactive or user_inactive; treasury: treasury_inactive, payer_not_allowed or policy_denied", {}],
          ["404", "user_not_found; treasury: treasury_not_configured, or not_found for an unknown payout", {}],
          ["409", "kyc_provider_conflict; treasury: insufficient_funds, idempotency_conflict or execution_conflict", {}],
          ["413", "body_too_large", {}],
          ["415", "unsupported_media_type: a Content-Encoding other than identity", { "Accept-Encoding": { required: true, schema: { const: "identity" } } }],
          ["429", "rate_limited", { "Retry-After": { required: true, schema: { const: "60" } } }],
          ["431", "request_header_fields_too_large: the request line and headers pass 16 KiB together; the connection is closed", {}],
          ["500", "internal_error", {}],
          ["503", "temporarily_unavailable, auth_unavailable, audit_unavailable or provider_unavailable", {}],
        ].map(([status, description, headers]) => [
          `E${status as string}`,
          json(ref("ResourceError"), description as string, headers as Record<string, unknown>),
        ]),
      ),
      schemas: {
        ...treasury.schemas,
        TokenResponse: {
          type: "object",
          required: ["access_token", "token_type", "expires_in", "scope"],
          properties: {
            access_token: { type: "string" },
            token_type: { const: "Bearer" },
            expires_in: { const: 3600 },
            scope: { type: "string" },
          },
          additionalProperties: false,
        },
        OAuthError: {
          type: "object",
          required: ["error"],
          properties: {
            error: {
              enum: ["invalid_request", "unsupported_grant_type", "invalid_scope", "invalid_client", "rate_limited", "server_error", "temporarily_unavailable"],
            },
            error_description: { type: "string" },
          },
          additionalProperties: false,
        },
        ResourceError: {
          type: "object",
          required: ["error"],
          properties: {
            error: {
              type: "object",
              required: ["code", "message", "request_id"],
              properties: {
                code: { enum: [...RESOURCE_ERROR_CODES] },
                message: { type: "string" },
                request_id: uuid,
              },
              additionalProperties: false,
            },
          },
          additionalProperties: false,
        },
        PreCreateRequest: {
          type: "object",
          required: ["email"],
          // idn-email, not email: the API takes internationalized addresses (`ada@bücher.example`).
          properties: { email: { type: "string", format: "idn-email", minLength: 3, maxLength: 254, pattern: EMAIL_PATTERN } },
          additionalProperties: false,
        },
        PreCreateResponse: {
          type: "object",
          required: ["user_id", "created"],
          properties: { user_id: uuid, created: { type: "boolean" } },
          additionalProperties: false,
        },
        KycStatus: {
          type: "object",
          required: ["user_id", "status", "provider", "updated_at"],
          properties: {
            user_id: uuid,
            status: { enum: [...KYC_STATUSES] },
            provider: { type: ["string", "null"] },
            updated_at: dateTime,
          },
          additionalProperties: false,
        },
        KycLinkRequest: {
          type: "object",
          properties: {
            provider: { type: "string", minLength: 1, maxLength: 64 },
            redirect_uri: { type: "string", format: "iri", maxLength: 2048, pattern: PARTNER_URL_PATTERN },
          },
          additionalProperties: false,
        },
        KycLink: {
          type: "object",
          required: ["url", "provider", "expires_at"],
          properties: { url: { type: "string", format: "uri" }, provider: { type: "string" }, expires_at: dateTime },
          additionalProperties: false,
        },
        Wallets: {
          type: "object",
          required: ["user_id", "wallets"],
          properties: {
            user_id: uuid,
            wallets: {
              type: "array",
              items: {
                type: "object",
                required: ["chain", "address"],
                properties: { chain: { enum: [...CHAINS] }, address: { type: "string" } },
                additionalProperties: false,
              },
            },
          },
          additionalProperties: false,
        },
        UsAccount: {
          type: "object",
          required: ["user_id", "status", "bank_name", "routing_number", "account_number", "account_type", "beneficiary_name"],
          properties: {
            user_id: uuid,
            status: { enum: ["provisioned", "not_provisioned"] },
            bank_name: { type: ["string", "null"] },
            routing_number: { type: ["string", "null"] },
            account_number: { type: ["string", "null"] },
            account_type: { type: ["string", "null"] },
            beneficiary_name: { type: ["string", "null"] },
          },
          additionalProperties: false,
        },
        Transfer: TRANSFER,
        TransferPage: {
          type: "object",
          required: ["data", "next_cursor", "watermark"],
          properties: { data: { type: "array", items: ref("Transfer") }, next_cursor: { type: ["string", "null"] }, watermark: { type: "string" } },
          additionalProperties: false,
        },
        EventPage: {
          type: "object",
          required: ["data", "next_cursor", "watermark"],
          properties: { data: { type: "array", items: ref("Event") }, next_cursor: { type: ["string", "null"] }, watermark: { type: "string" } },
          additionalProperties: false,
        },
        ...eventSchemas(ref, TRANSFER),
      },
    },
  };
}
