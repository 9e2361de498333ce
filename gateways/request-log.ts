import { LogController, type FastifyReply, type FastifyRequest } from "fastify";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../gen/vaultgate/common/v1/errors_pb.js";

/** Core's refusal reasons of requests answered with them (a JSON-RPC batch can have several). */
const refusals = new WeakMap<FastifyRequest, string>();

/**
 * Records core's refusal `err` on `request` so its one log line names the reason (undefined
 * for failures without one, logged where handled). Core does not log refusals of in-process
 * gateway calls, so this line is where they are seen.
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
 * One line per finished request (method, route pattern or query-less path, status, ms, core's
 * refusal `reason`, `reqId`) in place of fastify's two, which were a partner read's largest cost
 * after the database. The query string is left out because it can carry codes and states.
 */
class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const url = request.routeOptions.url ?? request.url.split("?", 1)[0];
    const ms = Math.round(reply.elapsedTime * 100) / 100;
    const reason = refusals.get(request);
    const line =
      reason === undefined
        ? { method: request.method, url, status: reply.statusCode, ms }
        : { method: request.method, url, status: reply.statusCode, ms, reason };
    if (error) reply.log.error({ ...line, err: error }, "request errored");
    else reply.log.info(line, "request");
  }
}

/** A fresh controller for each app (fastify's `logController` option). */
export function requestLogController(): LogController {
  return new OneLinePerRequest();
}
