import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyReply } from "fastify";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/** An RFC 6749 5.2 error as it leaves the process. */
export interface OAuthError {
  status: number;
  error: string;
  /** Fixed text for 5xx; the core message (written for clients) otherwise. */
  description?: string;
}

type Row = { status: number; error: string };
const SERVER_ERROR: Row = { status: 500, error: "server_error" };

/** Reason -> flat OAuth error. Every Reason has a row; `satisfies` keeps it exhaustive. */
const table = {
  [Reason.UNSPECIFIED]: SERVER_ERROR,
  [Reason.INVALID_REQUEST]: { status: 400, error: "invalid_request" },
  [Reason.NOT_FOUND]: SERVER_ERROR,
  [Reason.INTERNAL]: SERVER_ERROR,
  [Reason.RATE_LIMITED]: { status: 429, error: "rate_limited" },
  [Reason.OVERLOADED]: { status: 503, error: "temporarily_unavailable" },
  [Reason.UNAVAILABLE]: { status: 503, error: "temporarily_unavailable" },
  [Reason.IDEMPOTENCY_CONFLICT]: SERVER_ERROR,
  [Reason.ADMIN_UNAUTHENTICATED]: SERVER_ERROR,
  [Reason.INVALID_CLIENT]: { status: 401, error: "invalid_client" },
  [Reason.CLIENT_INACTIVE]: { status: 403, error: "invalid_client" },
  [Reason.UNSUPPORTED_GRANT_TYPE]: { status: 400, error: "unsupported_grant_type" },
  [Reason.UNAUTHORIZED_CLIENT]: { status: 400, error: "unauthorized_client" },
  [Reason.INVALID_SCOPE]: { status: 400, error: "invalid_scope" },
  [Reason.SIGNING_UNAVAILABLE]: { status: 503, error: "temporarily_unavailable" },
  [Reason.INVALID_GRANT]: { status: 400, error: "invalid_grant" },
  [Reason.INVALID_CLIENT_METADATA]: { status: 400, error: "invalid_client_metadata" },
  [Reason.INVALID_REDIRECT_URI]: { status: 400, error: "invalid_redirect_uri" },
  [Reason.ACCESS_DENIED]: { status: 403, error: "access_denied" },
  [Reason.INVALID_TARGET]: { status: 400, error: "invalid_target" },
  [Reason.INVALID_TOKEN]: { status: 401, error: "invalid_token" },
  [Reason.AUTH_UNAVAILABLE]: { status: 503, error: "temporarily_unavailable" },
  [Reason.GRANT_REQUIRED]: SERVER_ERROR,
  [Reason.PARTNER_INACTIVE]: { status: 403, error: "invalid_client" },
  [Reason.USER_INACTIVE]: SERVER_ERROR,
  [Reason.USER_NOT_FOUND]: SERVER_ERROR,
  [Reason.KYC_PROVIDER_CONFLICT]: SERVER_ERROR,
  [Reason.AUDIT_UNAVAILABLE]: { status: 503, error: "temporarily_unavailable" },
  [Reason.PROVIDER_UNAVAILABLE]: { status: 503, error: "temporarily_unavailable" },
  [Reason.INVALID_CURSOR]: SERVER_ERROR,
  [Reason.INSUFFICIENT_SCOPE]: { status: 400, error: "invalid_scope" },
  [Reason.TREASURY_INACTIVE]: SERVER_ERROR,
  [Reason.PAYER_NOT_ALLOWED]: SERVER_ERROR,
  [Reason.POLICY_DENIED]: SERVER_ERROR,
  [Reason.TREASURY_NOT_CONFIGURED]: SERVER_ERROR,
  [Reason.INSUFFICIENT_FUNDS]: SERVER_ERROR,
  [Reason.EXECUTION_CONFLICT]: SERVER_ERROR,
  [Reason.VAULT_CONTENTION]: SERVER_ERROR,
  [Reason.PROVISIONING_FAILED]: SERVER_ERROR,
  [Reason.WRONG_ENDPOINT]: SERVER_ERROR,
  [Reason.TOKEN_UNSUPPORTED]: SERVER_ERROR,
} satisfies Record<Reason, Row>;

const FIXED_5XX: Record<string, string> = {
  server_error: "the server could not complete the request",
  temporarily_unavailable: "the service is temporarily unavailable; retry with backoff",
};

/** Maps anything a core call threw to the flat OAuth envelope. */
export function oauthErrorFrom(err: unknown): OAuthError & { retryAfterSeconds?: number } {
  const connectErr = ConnectError.from(err);
  const detail = connectErr.findDetails(ErrorDetailSchema)[0];
  if (!detail) {
    // No domain reason: core unreachable (split deployment) or a bug.
    const row =
      connectErr.code === Code.Unavailable || connectErr.code === Code.DeadlineExceeded ? { status: 503, error: "temporarily_unavailable" } : SERVER_ERROR;
    return { ...row, description: FIXED_5XX[row.error] };
  }
  const row = table[detail.reason];
  const description = row.status >= 500 ? FIXED_5XX[row.error] : connectErr.rawMessage;
  return { ...row, description, retryAfterSeconds: detail.retryAfterSeconds || undefined };
}

/** True when core answered UNAVAILABLE (a database outage): core logged it once; the edge need not. */
export function isOutage(err: unknown): boolean {
  return err instanceof ConnectError && err.findDetails(ErrorDetailSchema)[0]?.reason === Reason.UNAVAILABLE;
}

/**
 * RFC 6749 5.2: error_description holds only %x20-21 / %x23-5B / %x5D-7E. A `"` reads as `'`; any
 * other character outside the set (a parameter name the caller chose, say) is percent-encoded.
 */
export function oauthDescription(text: string): string {
  return text.replace(/[^\x20-\x21\x23-\x5B\x5D-\x7E]/gu, (c) => (c === '"' ? "'" : LONE_SURROGATE.test(c) ? "%EF%BF%BD" : encodeURIComponent(c)));
}

const LONE_SURROGATE = /^[\uD800-\uDFFF]$/;

/** Renders the error; the caller sets surface-specific headers (WWW-Authenticate) first. */
export function sendOAuthError(reply: FastifyReply, e: OAuthError & { retryAfterSeconds?: number }) {
  // 429 always says how long to wait; a 503 does when core knows (OVERLOADED
  // sheds with the expected drain time), so clients back off instead of hammering.
  if (e.status === 429) reply.header("retry-after", String(e.retryAfterSeconds || 60));
  else if (e.status === 503 && e.retryAfterSeconds) reply.header("retry-after", String(e.retryAfterSeconds));
  return reply
    .code(e.status)
    .header("cache-control", "no-store")
    .header("pragma", "no-cache")
    .type("application/json")
    .send(e.description ? { error: e.error, error_description: oauthDescription(e.description) } : { error: e.error });
}
