import type { Socket } from "node:net";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";

/**
 * One signal per connection, made when its first core call asks: a signal per request cost the
 * hot routes a measurable share of their throughput. Aborted when the connection closes.
 */
const signals = new WeakMap<Socket, AbortSignal>();

/** What aborts a core call whose HTTP client left: Canceled, so a gRPC transport resets the stream with CANCEL. */
const clientLeft = () => new ConnectError("the client closed the connection before its answer", Code.Canceled);

/**
 * Aborted when the request's client closes its connection. A call still running then is one whose
 * answer nobody waits for; a call that finished before has removed its listeners, so the abort of a
 * connection closed after its answers reaches nothing.
 */
export function departureSignal(request: FastifyRequest): AbortSignal | undefined {
  const socket = request.raw.socket as Socket | null;
  if (!socket) return undefined;
  const known = signals.get(socket);
  if (known) return known;
  const controller = new AbortController();
  if (socket.destroyed) controller.abort(clientLeft());
  else socket.once("close", () => controller.abort(clientLeft()));
  signals.set(socket, controller.signal);
  return controller.signal;
}
