import { Code, ConnectError } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ErrorDetailSchema, Reason, type ErrorDetail } from "../gen/vaultgate/common/v1/errors_pb.js";

type ErrorDetailInit = MessageInitShape<typeof ErrorDetailSchema>;

/** The gRPC status each reason travels with; exhaustive so a new Reason is a compile error. */
const grpcCode = {
  [Reason.UNSPECIFIED]: Code.Unknown,
  [Reason.INVALID_REQUEST]: Code.InvalidArgument,
  [Reason.NOT_FOUND]: Code.NotFound,
  [Reason.INTERNAL]: Code.Internal,
  [Reason.RATE_LIMITED]: Code.ResourceExhausted,
  [Reason.OVERLOADED]: Code.Unavailable,
  [Reason.UNAVAILABLE]: Code.Unavailable,
  [Reason.IDEMPOTENCY_CONFLICT]: Code.AlreadyExists,
  [Reason.ADMIN_UNAUTHENTICATED]: Code.Unauthenticated,
  [Reason.INVALID_CLIENT]: Code.Unauthenticated,
  [Reason.CLIENT_INACTIVE]: Code.PermissionDenied,
  [Reason.UNSUPPORTED_GRANT_TYPE]: Code.InvalidArgument,
  [Reason.UNAUTHORIZED_CLIENT]: Code.PermissionDenied,
  [Reason.INVALID_SCOPE]: Code.InvalidArgument,
  [Reason.SIGNING_UNAVAILABLE]: Code.Unavailable,
  [Reason.INVALID_GRANT]: Code.InvalidArgument,
  [Reason.INVALID_CLIENT_METADATA]: Code.InvalidArgument,
  [Reason.INVALID_REDIRECT_URI]: Code.InvalidArgument,
  [Reason.ACCESS_DENIED]: Code.PermissionDenied,
  [Reason.INVALID_TARGET]: Code.InvalidArgument,
  [Reason.INVALID_TOKEN]: Code.Unauthenticated,
  [Reason.AUTH_UNAVAILABLE]: Code.Unavailable,
  [Reason.GRANT_REQUIRED]: Code.PermissionDenied,
  [Reason.PARTNER_INACTIVE]: Code.PermissionDenied,
  [Reason.USER_INACTIVE]: Code.PermissionDenied,
  [Reason.USER_NOT_FOUND]: Code.NotFound,
  [Reason.KYC_PROVIDER_CONFLICT]: Code.FailedPrecondition,
  [Reason.AUDIT_UNAVAILABLE]: Code.Unavailable,
  [Reason.PROVIDER_UNAVAILABLE]: Code.Unavailable,
  [Reason.INVALID_CURSOR]: Code.InvalidArgument,
  [Reason.INSUFFICIENT_SCOPE]: Code.PermissionDenied,
  [Reason.TREASURY_INACTIVE]: Code.PermissionDenied,
  [Reason.PAYER_NOT_ALLOWED]: Code.PermissionDenied,
  [Reason.POLICY_DENIED]: Code.PermissionDenied,
  [Reason.TREASURY_NOT_CONFIGURED]: Code.NotFound,
  [Reason.INSUFFICIENT_FUNDS]: Code.FailedPrecondition,
  [Reason.EXECUTION_CONFLICT]: Code.AlreadyExists,
  [Reason.VAULT_CONTENTION]: Code.Aborted,
  [Reason.PROVISIONING_FAILED]: Code.Internal,
  [Reason.WRONG_ENDPOINT]: Code.Unimplemented,
  [Reason.TOKEN_UNSUPPORTED]: Code.InvalidArgument,
} satisfies Record<Reason, Code>;

/** The longest refusal message, in code points: gRPC carries it in a header, so echoed input must not grow it. */
export const MAX_REFUSAL_MESSAGE = 512;

function bounded(message: string): string {
  if (message.length <= MAX_REFUSAL_MESSAGE) return message;
  const points = Array.from(message);
  return points.length <= MAX_REFUSAL_MESSAGE ? message : `${points.slice(0, MAX_REFUSAL_MESSAGE - 1).join("")}…`;
}

/** Raises an expected failure. 4xx messages reach clients: keep secrets and internals in `cause`. */
export function fail(reason: Reason, message: string, extra: Omit<ErrorDetailInit, "reason"> = {}, cause?: unknown): never {
  // A refusal is an answer, not a bug: nothing reads its stack (refusals are logged by
  // reason, and a cause keeps its own), and capturing one, with the async frames above
  // it, cost a tenth of the CPU of a request refused from memory.
  const stackTraceLimit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  let err: ConnectError;
  try {
    err = new ConnectError(bounded(message), grpcCode[reason], undefined, [{ desc: ErrorDetailSchema, value: { reason, ...extra } }], cause);
  } finally {
    Error.stackTraceLimit = stackTraceLimit;
  }
  throw err;
}

/** Reads the domain detail of any error; undefined for bugs and transport failures. */
export function errorDetailOf(err: unknown): ErrorDetail | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  return err.findDetails(ErrorDetailSchema)[0];
}

/** The gRPC code a reason travels with (exported for the error-table contract test). */
export function codeOf(reason: Reason): Code {
  return grpcCode[reason];
}
