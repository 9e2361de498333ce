import { ConnectError } from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/** Every code the resource envelope carries; the served OpenAPI document lists exactly these. */
export const RESOURCE_ERROR_CODES = [
  "invalid_request",
  "invalid_json",
  "invalid_cursor",
  "invalid_token",
  "grant_required",
  "partner_inactive",
  "user_inactive",
  "user_not_found",
  "not_found",
  "method_not_allowed",
  "kyc_provider_conflict",
  "body_too_large",
  "request_header_fields_too_large",
  "unsupported_media_type",
  "rate_limited",
  "internal_error",
  "temporarily_unavailable",
  "auth_unavailable",
  "audit_unavailable",
  "provider_unavailable",
  "treasury_inactive",
  "payer_not_allowed",
  "policy_denied",
  "treasury_not_configured",
  "insufficient_funds",
  "idempotency_conflict",
  "execution_conflict",
] as const;
export type ResourceErrorCode = (typeof RESOURCE_ERROR_CODES)[number];

/** A resource-envelope error as it leaves the process. */
export interface ResourceErrorBody {
  status: number;
  code: ResourceErrorCode;
  message: string;
  retryAfterSeconds?: number;
}

type Row = { status: number; code: ResourceErrorCode };
const INTERNAL: Row = { status: 500, code: "internal_error" };

/**
 * Reason -> resource envelope. Every Reason has a row; `satisfies`
 * makes a new Reason a compile error here. Reasons that cannot reach this surface
 * collapse to internal_error.
 */
const table = {
  [Reason.UNSPECIFIED]: INTERNAL,
  [Reason.INVALID_REQUEST]: { status: 400, code: "invalid_request" },
  // A named record (a payout receipt) that does not exist; same code as an unknown path.
  [Reason.NOT_FOUND]: { status: 404, code: "not_found" },
  [Reason.INTERNAL]: INTERNAL,
  [Reason.RATE_LIMITED]: { status: 429, code: "rate_limited" },
  [Reason.OVERLOADED]: { status: 503, code: "temporarily_unavailable" },
  [Reason.UNAVAILABLE]: { status: 503, code: "temporarily_unavailable" },
  [Reason.IDEMPOTENCY_CONFLICT]: { status: 409, code: "idempotency_conflict" },
  [Reason.ADMIN_UNAUTHENTICATED]: INTERNAL,
  [Reason.INVALID_CLIENT]: { status: 401, code: "invalid_token" },
  [Reason.CLIENT_INACTIVE]: { status: 403, code: "partner_inactive" },
  [Reason.UNSUPPORTED_GRANT_TYPE]: INTERNAL,
  [Reason.UNAUTHORIZED_CLIENT]: INTERNAL,
  [Reason.INVALID_SCOPE]: { status: 403, code: "grant_required" },
  [Reason.SIGNING_UNAVAILABLE]: { status: 503, code: "auth_unavailable" },
  [Reason.INVALID_GRANT]: INTERNAL,
  [Reason.INVALID_CLIENT_METADATA]: INTERNAL,
  [Reason.INVALID_REDIRECT_URI]: { status: 400, code: "invalid_request" },
  [Reason.ACCESS_DENIED]: { status: 403, code: "grant_required" },
  [Reason.INVALID_TARGET]: INTERNAL,
  [Reason.INVALID_TOKEN]: { status: 401, code: "invalid_token" },
  [Reason.AUTH_UNAVAILABLE]: { status: 503, code: "auth_unavailable" },
  [Reason.GRANT_REQUIRED]: { status: 403, code: "grant_required" },
  [Reason.PARTNER_INACTIVE]: { status: 403, code: "partner_inactive" },
  [Reason.USER_INACTIVE]: { status: 403, code: "user_inactive" },
  [Reason.USER_NOT_FOUND]: { status: 404, code: "user_not_found" },
  [Reason.KYC_PROVIDER_CONFLICT]: { status: 409, code: "kyc_provider_conflict" },
  [Reason.AUDIT_UNAVAILABLE]: { status: 503, code: "audit_unavailable" },
  [Reason.PROVIDER_UNAVAILABLE]: { status: 503, code: "provider_unavailable" },
  [Reason.INVALID_CURSOR]: { status: 400, code: "invalid_cursor" },
  [Reason.INSUFFICIENT_SCOPE]: { status: 403, code: "grant_required" },
  [Reason.TREASURY_INACTIVE]: { status: 403, code: "treasury_inactive" },
  [Reason.PAYER_NOT_ALLOWED]: { status: 403, code: "payer_not_allowed" },
  [Reason.POLICY_DENIED]: { status: 403, code: "policy_denied" },
  [Reason.TREASURY_NOT_CONFIGURED]: { status: 404, code: "treasury_not_configured" },
  [Reason.INSUFFICIENT_FUNDS]: { status: 409, code: "insufficient_funds" },
  [Reason.EXECUTION_CONFLICT]: { status: 409, code: "execution_conflict" },
  [Reason.VAULT_CONTENTION]: INTERNAL,
  [Reason.PROVISIONING_FAILED]: INTERNAL,
  [Reason.WRONG_ENDPOINT]: INTERNAL,
  [Reason.TOKEN_UNSUPPORTED]: INTERNAL,
} satisfies Record<Reason, Row>;

/** Fixed texts for 5xx: nothing internal ever reaches a body. */
const FIXED_5XX: Partial<Record<ResourceErrorCode, string>> = {
  internal_error: "the server could not complete the request",
  temporarily_unavailable: "the service is temporarily unavailable; retry after the Retry-After delay",
  auth_unavailable: "token verification is temporarily unavailable; retry with backoff",
  audit_unavailable: "the audit record could not be persisted; nothing was returned or changed; retry",
  provider_unavailable: "the upstream provider is unavailable; retry later",
};

/** Thrown by gateway checks (validation, bearer, body parsing) to answer in the envelope. */
export class ResourceError extends Error {
  constructor(
    readonly status: number,
    readonly code: ResourceErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export const invalidRequest = (message: string) => new ResourceError(400, "invalid_request", message);

/** Maps anything a handler threw to the envelope (edge errors, core reasons, bugs). */
export function resourceErrorFrom(err: unknown): ResourceErrorBody {
  if (err instanceof ResourceError) return { status: err.status, code: err.code, message: err.message };
  const edge = (err as { code?: unknown; statusCode?: unknown }) ?? {};
  if (typeof edge.code === "string" && edge.code.startsWith("FST_")) {
    if (edge.code === "FST_ERR_CTP_BODY_TOO_LARGE") return { status: 413, code: "body_too_large", message: "request body is too large" };
    if (edge.code === "FST_ERR_CTP_INVALID_JSON_BODY" || edge.code === "FST_ERR_CTP_EMPTY_JSON_BODY") {
      return { status: 400, code: "invalid_json", message: "request body is not valid JSON" };
    }
    if (typeof edge.statusCode === "number" && edge.statusCode >= 400 && edge.statusCode < 500) {
      return { status: 400, code: "invalid_request", message: "malformed request" };
    }
  }
  if (err instanceof ConnectError || (err instanceof Error && err.name === "ConnectError")) {
    const connectErr = ConnectError.from(err);
    const detail = connectErr.findDetails(ErrorDetailSchema)[0];
    if (detail) {
      const row = table[detail.reason];
      const message = row.status >= 500 ? (FIXED_5XX[row.code] ?? FIXED_5XX.internal_error!) : connectErr.rawMessage;
      return { ...row, message, retryAfterSeconds: detail.retryAfterSeconds || undefined };
    }
  }
  return { ...INTERNAL, message: FIXED_5XX.internal_error! };
}

/** Renders `{error:{code,message,request_id}}`; request_id is the X-Request-Id of this response. */
export function sendResourceError(request: FastifyRequest, reply: FastifyReply, e: ResourceErrorBody) {
  // RFC 6750 3.1: a request that sent no bearer token (none, or another scheme) gets no error code.
  if (e.status === 401) reply.header("www-authenticate", e.code === "invalid_token" && sentBearer(request) ? `Bearer error="invalid_token"` : "Bearer");
  // Every resource 429 says Retry-After: 60.
  if (e.status === 429) reply.header("retry-after", String(e.retryAfterSeconds ?? 60));
  else if (e.status === 503 && e.retryAfterSeconds) reply.header("retry-after", String(e.retryAfterSeconds));
  return reply
    .code(e.status)
    .header("cache-control", "no-store")
    .type("application/json")
    .send({ error: { code: e.code, message: e.message, request_id: request.id } });
}

function sentBearer(request: FastifyRequest): boolean {
  const header = request.headers.authorization;
  return typeof header === "string" && /^\s*Bearer(\s|$)/i.test(header);
}

/** The reason table, exported for the envelope contract test. */
export const resourceErrorTable: Readonly<Record<Reason, Row>> = table;
