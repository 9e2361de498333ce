import type { ServerResponse } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";

/** Each request's response, recorded by the app's onRequest hook; its signal is made only when a core call asks. */
const responses = new WeakMap<FastifyRequest, ServerResponse>();
const signals = new WeakMap<FastifyRequest, AbortSignal>();

/** What aborts a core call whose HTTP client left: Canceled, so a gRPC transport resets the stream with CANCEL. */
const clientLeft = () => new ConnectError("the client closed the connection before its answer", Code.Canceled);

/** Called for every request (onRequest): only a WeakMap entry, so requests that call no core pay nothing more. */
export function watchDeparture(request: FastifyRequest, reply: FastifyReply): void {
  responses.set(request, reply.raw);
}

/**
 * Aborted when the request's client closes its connection before the answer was sent. A response
 * closes when it is sent too, so only a close before it finished counts (a request's own close
 * event fires once its body is read, so it cannot tell).
 */
export function departureSignal(request: FastifyRequest): AbortSignal | undefined {
  const known = signals.get(request);
  if (known) return known;
  const res = responses.get(request);
  if (!res) return undefined;
  const controller = new AbortController();
  if (res.closed) {
    if (!res.writableFinished) controller.abort(clientLeft());
  } else {
    res.once("close", () => {
      if (!res.writableFinished) controller.abort(clientLeft());
    });
  }
  signals.set(request, controller.signal);
  return controller.signal;
}
