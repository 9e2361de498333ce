import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/** JSON-RPC 2.0 error codes we answer with (the standard ones, plus -32003 for funds). */
export const RpcCode = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  UNAUTHORIZED: -32001,
  POLICY_DENIED: -32002,
  INSUFFICIENT_FUNDS: -32003,
  RATE_LIMITED: -32004,
  VAULT_CONTENTION: -32005,
  /** MCP 2025-11-25: the request needs the user at a URL first (URLElicitationRequiredError). */
  URL_ELICITATION_REQUIRED: -32042,
} as const;

export type RpcId = string | number | null;

export interface RpcErrorBody {
  code: number;
  message: string;
  data: Record<string, unknown>;
}

/** An error that leaves as a JSON-RPC error object; `unauthorized` adds HTTP 401 + challenge. */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data: Record<string, unknown>,
    readonly unauthorized = false,
  ) {
    super(message);
  }
  body(requestId: string): RpcErrorBody {
    return { code: this.code, message: this.message, data: { ...this.data, request_id: requestId } };
  }
}

type Row = { code: number; reasonId: string; unauthorized?: boolean };
const INTERNAL: Row = { code: RpcCode.INTERNAL_ERROR, reasonId: "internal_error" };

/** Reason -> JSON-RPC error. Every Reason has a row; `satisfies` keeps it exhaustive. */
const table = {
  [Reason.UNSPECIFIED]: INTERNAL,
  [Reason.INVALID_REQUEST]: { code: RpcCode.INVALID_PARAMS, reasonId: "invalid_params" },
  [Reason.NOT_FOUND]: { code: RpcCode.INVALID_PARAMS, reasonId: "not_found" },
  [Reason.INTERNAL]: INTERNAL,
  [Reason.RATE_LIMITED]: { code: RpcCode.RATE_LIMITED, reasonId: "rate_limited" },
  [Reason.OVERLOADED]: { code: RpcCode.INTERNAL_ERROR, reasonId: "temporarily_unavailable" },
  [Reason.UNAVAILABLE]: { code: RpcCode.INTERNAL_ERROR, reasonId: "temporarily_unavailable" },
  [Reason.IDEMPOTENCY_CONFLICT]: { code: RpcCode.INVALID_PARAMS, reasonId: "idempotency_conflict" },
  [Reason.ADMIN_UNAUTHENTICATED]: INTERNAL,
  [Reason.INVALID_CLIENT]: { code: RpcCode.UNAUTHORIZED, reasonId: "invalid_client" },
  [Reason.CLIENT_INACTIVE]: { code: RpcCode.UNAUTHORIZED, reasonId: "invalid_client" },
  [Reason.UNSUPPORTED_GRANT_TYPE]: { code: RpcCode.INVALID_PARAMS, reasonId: "unsupported_grant_type" },
  [Reason.UNAUTHORIZED_CLIENT]: { code: RpcCode.INVALID_PARAMS, reasonId: "unauthorized_client" },
  [Reason.INVALID_SCOPE]: { code: RpcCode.INVALID_PARAMS, reasonId: "invalid_scope" },
  [Reason.SIGNING_UNAVAILABLE]: { code: RpcCode.INTERNAL_ERROR, reasonId: "temporarily_unavailable" },
  [Reason.INVALID_GRANT]: { code: RpcCode.UNAUTHORIZED, reasonId: "invalid_grant" },
  [Reason.INVALID_CLIENT_METADATA]: { code: RpcCode.INVALID_PARAMS, reasonId: "invalid_params" },
  [Reason.INVALID_REDIRECT_URI]: { code: RpcCode.INVALID_PARAMS, reasonId: "invalid_params" },
  [Reason.ACCESS_DENIED]: { code: RpcCode.POLICY_DENIED, reasonId: "access_denied" },
  [Reason.INVALID_TARGET]: { code: RpcCode.INVALID_PARAMS, reasonId: "invalid_target" },
  [Reason.INVALID_TOKEN]: { code: RpcCode.UNAUTHORIZED, reasonId: "invalid_token", unauthorized: true },
  [Reason.AUTH_UNAVAILABLE]: { code: RpcCode.INTERNAL_ERROR, reasonId: "auth_unavailable" },
  [Reason.GRANT_REQUIRED]: { code: RpcCode.POLICY_DENIED, reasonId: "grant_required" },
  [Reason.PARTNER_INACTIVE]: INTERNAL,
  [Reason.USER_INACTIVE]: { code: RpcCode.POLICY_DENIED, reasonId: "user_inactive" },
  [Reason.USER_NOT_FOUND]: { code: RpcCode.INVALID_PARAMS, reasonId: "not_found" },
  [Reason.KYC_PROVIDER_CONFLICT]: INTERNAL,
  [Reason.AUDIT_UNAVAILABLE]: { code: RpcCode.INTERNAL_ERROR, reasonId: "audit_unavailable" },
  [Reason.PROVIDER_UNAVAILABLE]: { code: RpcCode.INTERNAL_ERROR, reasonId: "temporarily_unavailable" },
  [Reason.INVALID_CURSOR]: { code: RpcCode.INVALID_PARAMS, reasonId: "invalid_cursor" },
  [Reason.INSUFFICIENT_SCOPE]: { code: RpcCode.POLICY_DENIED, reasonId: "insufficient_scope" },
  [Reason.TREASURY_INACTIVE]: INTERNAL,
  [Reason.PAYER_NOT_ALLOWED]: INTERNAL,
  [Reason.POLICY_DENIED]: { code: RpcCode.POLICY_DENIED, reasonId: "policy_denied" },
  [Reason.TREASURY_NOT_CONFIGURED]: INTERNAL,
  [Reason.INSUFFICIENT_FUNDS]: { code: RpcCode.INSUFFICIENT_FUNDS, reasonId: "insufficient_funds" },
  [Reason.EXECUTION_CONFLICT]: INTERNAL,
  [Reason.VAULT_CONTENTION]: { code: RpcCode.VAULT_CONTENTION, reasonId: "vault_contention" },
  [Reason.PROVISIONING_FAILED]: { code: RpcCode.INTERNAL_ERROR, reasonId: "provisioning_failed" },
  [Reason.WRONG_ENDPOINT]: { code: RpcCode.METHOD_NOT_FOUND, reasonId: "wrong_endpoint" },
  [Reason.TOKEN_UNSUPPORTED]: { code: RpcCode.INVALID_PARAMS, reasonId: "token_unsupported" },
} satisfies Record<Reason, Row>;

/** Fixed client-facing text per code; core's message is used only for client-class errors. */
const FIXED: Record<number, string> = {
  [RpcCode.INTERNAL_ERROR]: "Internal error",
  [RpcCode.RATE_LIMITED]: "Rate limited",
  [RpcCode.VAULT_CONTENTION]: "Vault contention",
  [RpcCode.UNAUTHORIZED]: "Unauthorized",
};

/** Maps anything a core call threw to a JSON-RPC error; bugs and transport failures say nothing more. */
export function rpcErrorFrom(err: unknown): RpcError {
  if (err instanceof RpcError) return err;
  const e = ConnectError.from(err);
  const detail = e.findDetails(ErrorDetailSchema)[0];
  if (!detail) {
    const reasonId = e.code === Code.Unavailable || e.code === Code.DeadlineExceeded ? "temporarily_unavailable" : "internal_error";
    return new RpcError(RpcCode.INTERNAL_ERROR, "Internal error", { reason_id: reasonId });
  }
  const row: Row = table[detail.reason];
  const data: Record<string, unknown> = { reason_id: row.reasonId };
  // The wait rides on -32004 only.
  if (row.code === RpcCode.RATE_LIMITED) data.retry_after_seconds = detail.retryAfterSeconds || 60;
  // A dependency outage is retryable too: the wait rides in data, the code stays -32603.
  if (detail.reason === Reason.UNAVAILABLE) data.retry_after_seconds = detail.retryAfterSeconds || 5;
  if (detail.limitName) data.limit = detail.limitName;
  if (detail.provisioning) {
    data.provisioning = detail.provisioning.steps.map((s) => ({ step: s.name, state: s.state }));
    data.cleanup = detail.provisioning.cleanup;
    data.remaining = detail.provisioning.remaining;
  }
  const message = row.code === RpcCode.INTERNAL_ERROR ? FIXED[row.code]! : e.rawMessage || FIXED[row.code] || row.reasonId;
  return new RpcError(row.code, message, data, row.unauthorized ?? false);
}
