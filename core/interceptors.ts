import { uuidv7 } from "../lib/uuidv7.js";
import { clientNetwork } from "../lib/client-network.js";
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { admin_only } from "../gen/vaultgate/common/v1/options_pb.js";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import {
  CLIENT_ADDRESS_HEADER,
  GATEWAY_CREDENTIAL_HEADER,
  kClientAddress,
  kClientNetwork,
  kGatewayCaller,
  kInProcess,
  kOperator,
  kRequestId,
  REQUEST_ID_HEADER,
} from "./context.js";
import { codeOf, errorDetailOf, fail } from "./errors.js";
import { refuseAbandonedCalls } from "./deadlines.js";
import { inputGuard } from "./input-guard.js";
import { observeCalls } from "./observability/tracing.js";
import { constantTimeEqual } from "../lib/crypto.js";
import { UUID } from "../lib/uuid.js";

export interface InterceptorOptions {
  logger: Logger;
  /** Operator credential for admin_only RPCs; undefined disables them entirely. */
  adminToken: string | undefined;
  /** Gateway credential: lets a gateway vouch for the client address it saw; undefined = nobody can. */
  gatewayToken: string | undefined;
  /** Run each call in an OpenTelemetry server span (docs/operating-observability.md); default off. */
  tracing?: boolean;
}

/** The interceptors core runs on every transport, in order; the deadline is checked last, just before the handler. */
export function createCoreInterceptors(options: InterceptorOptions): Interceptor[] {
  return [
    observeCalls({ tracing: options.tracing ?? false }),
    requestContext(options.logger, options.gatewayToken),
    callerCredentials(options.adminToken),
    inputGuard(),
    refuseAbandonedCalls(),
  ];
}

/**
 * Checks the gateway credential once and binds the request id (a fresh one for direct callers, so
 * nobody forges audit ids). In-process gateways log their own refusals on their request line.
 */
function requestContext(logger: Logger, gatewayToken: string | undefined): Interceptor {
  return (next) => async (req) => {
    const vouch = req.header.get(GATEWAY_CREDENTIAL_HEADER);
    const gateway = vouch !== null && !!gatewayToken && constantTimeEqual(vouch, gatewayToken);
    if (gateway) req.contextValues.set(kGatewayCaller, true);
    const given = gateway || req.contextValues.get(kInProcess) ? req.header.get(REQUEST_ID_HEADER) : null;
    const requestId = given && UUID.test(given) ? given.toLowerCase() : uuidv7();
    req.contextValues.set(kRequestId, requestId);
    try {
      return await next(req);
    } catch (err) {
      const outage = databaseOutage(err);
      const detail = outage ? undefined : errorDetailOf(err);
      // A gateway in this process names the refusal in its request's one line.
      if (detail && req.contextValues.get(kInProcess) && !OUR_FAILURES.has(detail.reason)) throw err;
      // Only a call that logs pays for the child logger (pino redacts its bindings).
      const log = logger.child({ requestId, rpc: `${req.service.typeName}/${req.method.name}` });
      if (outage) {
        log.warn({ dependency: "database", cause: outage }, "rpc unavailable: database unreachable");
        fail(Reason.UNAVAILABLE, "a dependency is temporarily unavailable; retry later", { retryAfterSeconds: DATABASE_RETRY_AFTER_SECONDS }, err);
      }
      // Our own failures carry their cause (a provider's or the database's error) only here: log it.
      if (detail && OUR_FAILURES.has(detail.reason)) log.warn({ reason: Reason[detail.reason], err: causeOf(err) }, "rpc failed on our side");
      else if (detail) log.info({ reason: Reason[detail.reason] }, "rpc refused");
      else if (err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown) log.info({ code: Code[err.code] }, "rpc failed");
      else log.error({ err: err instanceof ConnectError && err.cause ? err.cause : err }, "rpc error");
      throw err;
    }
  };
}

const causeOf = (err: unknown) => (err instanceof ConnectError && err.cause !== undefined ? err.cause : err);

/**
 * Reasons that report a failure on our side, logged for every caller. OVERLOADED is not one: load
 * shedding answers the caller's load, like a rate limit.
 */
const OUR_FAILURES: ReadonlySet<Reason> = new Set(
  (Object.values(Reason).filter((r) => typeof r === "number") as Reason[]).filter(
    (r) => r !== Reason.OVERLOADED && [Code.Internal, Code.Unknown, Code.Unavailable, Code.DataLoss].includes(codeOf(r)),
  ),
);

/** What a client is told to wait after a database outage: long enough for a failover or restart to show. */
const DATABASE_RETRY_AFTER_SECONDS = 5;

/** SQLSTATEs that mean "the database is not there for us" (not "your query is wrong"). */
const OUTAGE_SQLSTATES = new Set(["57P01", "57P02", "57P03", "53300", "53400"]);
/** Socket errors of the driver when the server is unreachable or drops the connection. */
const OUTAGE_ERRNOS = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN"]);
// Matched anywhere: knex prefixes a failed query's message with its SQL ("select ... - Connection terminated").
const OUTAGE_MESSAGES =
  /Connection terminated|Client has encountered a connection error|Client was closed and is not queryable|Timeout acquiring a connection|timeout exceeded when trying to connect/;

/**
 * Says whether the database went away, anywhere in the cause chain, so one outage gives one answer
 * even through a service's internal wrap (e.g. AUDIT_UNAVAILABLE). Domain refusals are never reclassified.
 */
export function databaseOutage(err: unknown): string | undefined {
  const detail = errorDetailOf(err);
  if (detail && ![Code.Internal, Code.Unavailable, Code.Unknown].includes(codeOf(detail.reason))) return undefined;
  if (detail?.reason === Reason.UNAVAILABLE) return undefined;
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0) {
    const e = queue.shift();
    if (!e || typeof e !== "object" || seen.has(e)) continue;
    seen.add(e);
    const { code, message, name, cause, errors } = e as { code?: unknown; message?: unknown; name?: unknown; cause?: unknown; errors?: unknown };
    if (typeof code === "string" && (OUTAGE_SQLSTATES.has(code) || /^08[0-9A-Z]{3}$/.test(code) || OUTAGE_ERRNOS.has(code))) return code;
    if (name === "KnexTimeoutError") return "pool acquire timeout";
    if (typeof message === "string") {
      const m = OUTAGE_MESSAGES.exec(message);
      if (m) return m[0];
    }
    queue.push(cause);
    if (Array.isArray(errors)) queue.push(...errors);
  }
  return undefined;
}

/** The auth scheme is case-insensitive (RFC 9110), and some clients put more than one space after it. */
const BEARER = /^bearer +([^ ]+)$/i;

/**
 * Core trusts no caller: this decides only what a header can prove (operator and gateway
 * credentials); every other credential travels in the message. See docs/trust-model.md.
 */
function callerCredentials(adminToken: string | undefined): Interceptor {
  // getOption decodes the method's options on every call; the answer never changes.
  const adminOnly = new WeakMap<DescMethod, boolean>();
  const isAdminOnly = (method: DescMethod) => {
    let v = adminOnly.get(method);
    if (v === undefined) adminOnly.set(method, (v = getOption(method, admin_only)));
    return v;
  };
  return (next) => (req) => {
    const header = req.header.get("authorization");
    if (header !== null && adminToken) {
      const presented = BEARER.exec(header)?.[1] ?? "";
      if (presented && constantTimeEqual(presented, adminToken)) req.contextValues.set(kOperator, true);
    }
    if (isAdminOnly(req.method) && !req.contextValues.get(kOperator)) fail(Reason.ADMIN_UNAUTHENTICATED, "operator credential required");
    if (req.contextValues.get(kGatewayCaller)) {
      const address = (req.header.get(CLIENT_ADDRESS_HEADER) ?? "").slice(0, 64);
      req.contextValues.set(kClientAddress, address);
      req.contextValues.set(kClientNetwork, clientNetwork(address));
    }
    return next(req);
  };
}
