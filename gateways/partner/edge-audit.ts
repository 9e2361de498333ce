import type { FastifyReply, FastifyRequest } from "fastify";
import { ConnectError } from "@connectrpc/connect";
import { EdgeRejection } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { bearerToken } from "./bearer.js";
import { ResourceError, resourceErrorFrom, sendResourceError, type ResourceErrorBody } from "./resource-envelope.js";
import { noteRefusal } from "../request-log.js";
import { withRequestId } from "../core-clients.js";

/** Which edge rejection a gateway-made error is, if it is one (core's errors never are). */
export function edgeRejectionOf(e: ResourceErrorBody): EdgeRejection | undefined {
  if (e.code === "body_too_large") return EdgeRejection.BODY_TOO_LARGE;
  if (e.code === "invalid_json") return EdgeRejection.INVALID_JSON;
  if (e.code === "invalid_token") return EdgeRejection.BEARER_MISSING;
  if (e.code === "unsupported_media_type") return EdgeRejection.UNSUPPORTED_ENCODING;
  if (e.status >= 400 && e.status < 500) return EdgeRejection.MALFORMED;
  return undefined;
}

/** The bearer token if the header carries one, else "" (core then audits "anonymous"). */
export function lenientBearer(request: FastifyRequest): string {
  try {
    return bearerToken(request);
  } catch {
    return "";
  }
}

/**
 * The framing refusal an error is, if the edge made it before the handler ran (size, JSON,
 * content coding, an unreadable request); the handler's own errors (bearer, shape) are not.
 */
function framingRefusalOf(err: unknown, e: ResourceErrorBody): EdgeRejection | undefined {
  if (err instanceof ConnectError) return undefined;
  const rejection = edgeRejectionOf(e);
  if (rejection === EdgeRejection.BEARER_MISSING) return undefined;
  if (rejection === EdgeRejection.MALFORMED && err instanceof ResourceError) return undefined;
  return rejection;
}

/**
 * A route error handler that hands a bearer-carrying request's framing refusal to core (`record`, the route's RPC),
 * which checks the caller and audits it under the partner proved. The edge's answer stands, so a
 * caller learns nothing new before the bearer check, unless the record failed (5xx).
 */
export function framingAudited(
  record: (req: { accessToken: string; edgeRejection: EdgeRejection }, options: ReturnType<typeof withRequestId>) => Promise<unknown>,
) {
  return async (err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    noteRefusal(request, err);
    let answer = resourceErrorFrom(err);
    const rejection = framingRefusalOf(err, answer);
    const accessToken = rejection === undefined ? "" : lenientBearer(request);
    if (rejection !== undefined && accessToken !== "") {
      const recorded = await record({ accessToken, edgeRejection: rejection }, withRequestId(request.id, request.clientAddress)).then(
        () => undefined,
        (e: unknown) => resourceErrorFrom(e),
      );
      // Unusable verification keys prove no partner, so no row is owed: the edge's answer stands.
      if (recorded && recorded.status >= 500 && recorded.code !== "auth_unavailable") answer = recorded;
    }
    if (answer.status >= 500 && answer.code !== "temporarily_unavailable") request.log.error({ err }, "partner resource failure");
    return sendResourceError(request, reply, answer);
  };
}
