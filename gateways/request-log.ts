import { LogController, type FastifyReply, type FastifyRequest } from "fastify";

/**
 * One log line per request, written when the response is done: method, path (the route
 * pattern when one matched, else the path without its query string, which can carry
 * codes and states), status, duration in ms and the request id (`reqId`, bound by
 * fastify). Fastify's own controller writes two lines per request ("incoming request"
 * and "request completed", each with the serialized request or reply); at the default
 * `info` level those two lines were the largest cost of a partner read after the database
 * (`npm run bench partner-resources` prints info against silent).
 */
class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    const line = { method: request.method, url: request.routeOptions.url ?? request.url.split("?", 1)[0], status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 };
    if (error) reply.log.error({ ...line, err: error }, "request errored");
    else reply.log.info(line, "request");
  }
}

/** A fresh controller for each app (fastify's `logController` option). */
export function requestLogController(): LogController {
  return new OneLinePerRequest();
}
