import { LogController, type FastifyReply, type FastifyRequest } from "fastify";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../gen/vaultgate/common/v1/errors_pb.js";

/** Core's refusal reasons of requests answered with them (a JSON-RPC batch can have several). */
const refusals = new WeakMap<FastifyRequest, string>();

/**
 * Records that `request` is answered with core's refusal `err`, so that its one log line
 * names the reason, and returns the reason; undefined (nothing recorded) for anything
 * without one (a bug, core unreachable), which is logged where it is handled, with its
 * error. Core does not log refusals of calls from a gateway in its own process (the
 * in-process transport): this line is where they are seen.
 */
export function noteRefusal(request: FastifyRequest, err: unknown): Reason | undefined {
  if (!(err instanceof ConnectError)) return undefined;
  const detail = err.findDetails(ErrorDetailSchema)[0];
  if (!detail) return undefined;
  const name = Reason[detail.reason] ?? String(detail.reason);
  const before = refusals.get(request);
  if (before === undefined) refusals.set(request, name);
  else if (!before.split(",").includes(name)) refusals.set(request, `${before},${name}`);
  return detail.reason;
}

/**
 * One log line per request, written when the response is done: method, path (the route
 * pattern when one matched, else the path without its query string, which can carry
 * codes and states), status, duration in ms, core's refusal reason when the answer was
 * one (`reason`, see noteRefusal) and the request id (`reqId`, bound by fastify).
 * Fastify's own controller writes two lines per request ("incoming request" and "request
 * completed", each with the serialized request or reply); at the default `info` level
 * those two lines were the largest cost of a partner read after the database (`npm run
 * bench partner-resources` prints info against silent).
 */
class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const url = request.routeOptions.url ?? request.url.split("?", 1)[0];
    const ms = Math.round(reply.elapsedTime * 100) / 100;
    const reason = refusals.get(request);
    const line = reason === undefined ? { method: request.method, url, status: reply.statusCode, ms } : { method: request.method, url, status: reply.statusCode, ms, reason };
    if (error) reply.log.error({ ...line, err: error }, "request errored");
    else reply.log.info(line, "request");
  }
}

/** A fresh controller for each app (fastify's `logController` option). */
export function requestLogController(): LogController {
  return new OneLinePerRequest();
}
