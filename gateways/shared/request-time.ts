import type { FastifyInstance } from "fastify";

/**
 * Node's `requestTimeout` stops at the end of the headers, so a client trickling its body
 * could hold a connection and its buffered body for ever. A request whose body has not all
 * arrived within `ms` is answered in its surface's envelope and its connection closed.
 */
export function limitRequestTime(app: FastifyInstance, ms: number): void {
  app.addHook("onRequest", (request, reply, done) => {
    const timer = setTimeout(() => {
      if (request.raw.complete || reply.sent) return;
      request.log.info("request body did not arrive in time");
      reply.code(408).header("connection", "close");
      reply.send(Object.assign(new Error("the request did not arrive in time"), { statusCode: 408, code: "FST_ERR_REQUEST_TIMEOUT" }));
    }, ms);
    reply.raw.once("close", () => clearTimeout(timer));
    done();
  });
}
