import { randomUUID } from "node:crypto";
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { admin_only } from "../gen/vaultgate/common/v1/options_pb.js";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { kRequestId, REQUEST_ID_HEADER } from "./context.js";
import { errorDetailOf, fail } from "./errors.js";
import { constantTimeEqual } from "./partners/credentials.js";
import { UUID } from "./uuid.js";

export interface InterceptorOptions {
  logger: Logger;
  /** Operator credential for admin_only RPCs; undefined disables them entirely. */
  adminToken: string | undefined;
}

/** The interceptors core runs on every transport, in order. */
export function createCoreInterceptors(options: InterceptorOptions): Interceptor[] {
  return [requestContext(options.logger), adminAuth(options.adminToken)];
}

/**
 * Binds the request id (from the gateway, or minted for direct gRPC callers); logs
 * refusals, and bugs (errors without a domain reason) with their stack, through a child
 * logger bound to the request id.
 */
function requestContext(logger: Logger): Interceptor {
  return (next) => async (req) => {
    const given = req.header.get(REQUEST_ID_HEADER);
    const requestId = given && UUID.test(given) ? given.toLowerCase() : randomUUID();
    req.contextValues.set(kRequestId, requestId);
    try {
      return await next(req);
    } catch (err) {
      // Only a failed call logs, so only it pays for the child logger (pino redacts its bindings).
      const log = logger.child({ requestId, rpc: `${req.service.typeName}/${req.method.name}` });
      const detail = errorDetailOf(err);
      if (detail) log.info({ reason: Reason[detail.reason] }, "rpc refused");
      else if (err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown) log.info({ code: Code[err.code] }, "rpc failed");
      else log.error({ err: err instanceof ConnectError && err.cause ? err.cause : err }, "rpc error");
      throw err;
    }
  };
}

/** admin_only RPCs need `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time. */
function adminAuth(adminToken: string | undefined): Interceptor {
  // getOption decodes the method's options on every call; the answer never changes.
  const adminOnly = new WeakMap<DescMethod, boolean>();
  const isAdminOnly = (method: DescMethod) => {
    let v = adminOnly.get(method);
    if (v === undefined) adminOnly.set(method, (v = getOption(method, admin_only)));
    return v;
  };
  return (next) => async (req) => {
    if (isAdminOnly(req.method)) {
      const header = req.header.get("authorization") ?? "";
      const presented = header.startsWith("Bearer ") ? header.slice(7) : "";
      if (!adminToken || !presented || !constantTimeEqual(presented, adminToken)) {
        fail(Reason.ADMIN_UNAUTHENTICATED, "operator credential required");
      }
    }
    return next(req);
  };
}
