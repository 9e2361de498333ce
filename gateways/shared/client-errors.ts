import { STATUS_CODES, type IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { FastifyBaseLogger } from "fastify";
import { uuidv7 } from "../../lib/uuidv7.js";

/** A request Node's HTTP parser refused before any request object existed. */
export interface ClientError extends Error {
  code?: string;
  /** The bytes being parsed when it failed (a Buffer): from the request line on, when it came in one read. */
  rawPacket?: unknown;
}

/** A surface's own answer to such a request: its status and JSON body. */
export type ClientErrorAnswer = { status: number; body: string };

/** fastify's own bodies for these refusals, kept for paths no surface answers itself. */
const PLAIN_MESSAGES: Record<number, string> = {
  400: "Client Error",
  408: "Client Timeout",
  431: "Exceeded maximum allowed HTTP header size",
};

/** How long an answered connection may stay open for its client to read the answer and close. */
const LINGER_MS = 5000;

/** How much of the request line is read for its target: enough to tell which surface owns it. */
const TARGET_PREFIX_BYTES = 256;

/**
 * The request target (path and query) as far as the first read holds it, or "" when that
 * read did not start with a request line (the request came in several reads).
 */
export function requestTargetOf(rawPacket: unknown): string {
  if (!Buffer.isBuffer(rawPacket)) return "";
  const line = rawPacket.toString("latin1", 0, Math.min(rawPacket.length, TARGET_PREFIX_BYTES));
  const match = /^[A-Z]{1,16} (\/[^\s]*)/.exec(line);
  return match ? match[1]! : "";
}

/** The status a parser refusal is answered with: 408 late headers, 431 headers over the limit, else 400. */
export function clientErrorStatus(err: ClientError): number {
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") return 408;
  if (err.code === "HPE_HEADER_OVERFLOW") return 431;
  return 400;
}

/**
 * fastify's `clientErrorHandler`: answers a request the HTTP parser refused with a request id
 * and a closed connection, in the envelope `answerFor` gives for its target (undefined: plain
 * JSON as fastify's). A reset or already closed connection gets nothing.
 */
export function clientErrorHandler(
  log: FastifyBaseLogger,
  answerFor: (target: string, status: number, requestId: string) => ClientErrorAnswer | undefined,
): (err: ClientError, socket: Socket) => void {
  return (err, socket) => {
    // The parser keeps refusing whatever else arrives on a connection already answered.
    if (err.code === "ECONNRESET" || socket.destroyed || socket.writableEnded) return;
    const status = clientErrorStatus(err);
    const requestId = uuidv7();
    const target = requestTargetOf(err.rawPacket);
    const answer = answerFor(target, status, requestId) ?? plainAnswer(status);
    log.info({ reqId: requestId, code: err.code, res: { statusCode: answer.status } }, "refused a request the HTTP parser could not read");
    answerAndClose(socket, answer, requestId);
  };
}

/** fastify's JSON for a refusal, on paths no surface answers in an envelope of its own. */
export function plainAnswer(status: number): ClientErrorAnswer {
  return { status, body: JSON.stringify({ error: STATUS_CODES[status], message: PLAIN_MESSAGES[status], statusCode: status }) };
}

/**
 * The http server's `connect` listener: a CONNECT (a proxy tunnel, which no surface serves) is
 * answered 405 with a request id and a closed connection; without one Node drops the socket unanswered.
 */
export function connectRefusal(log: FastifyBaseLogger): (req: IncomingMessage, socket: Duplex) => void {
  return (_req, socket) => {
    const requestId = uuidv7();
    log.info({ reqId: requestId, method: "CONNECT", res: { statusCode: 405 } }, "refused a CONNECT: no tunnel is served here");
    const body = JSON.stringify({ error: STATUS_CODES[405], message: "CONNECT is not served here", statusCode: 405 });
    answerAndClose(socket as Socket, { status: 405, body }, requestId, ["allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"]);
  };
}

/** Writes a whole JSON answer on a socket no request object owns, and closes the connection. */
function answerAndClose(socket: Socket, answer: ClientErrorAnswer, requestId: string, extra: string[] = []): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const head = [
    `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}`,
    ...extra,
    "content-type: application/json; charset=utf-8",
    `content-length: ${Buffer.byteLength(answer.body)}`,
    `x-request-id: ${requestId}`,
    "x-content-type-options: nosniff",
    "cache-control: no-store",
    // What a token endpoint's answers carry too (RFC 6749 5.1); harmless on any other.
    "pragma: no-cache",
    "connection: close",
  ];
  socket.end(`${head.join("\r\n")}\r\n\r\n${answer.body}`);
  // Closed by the client once it has read the answer; destroyed at once, unread request bytes
  // could reset the connection before the answer is read. A client that stays is dropped.
  const drop = setTimeout(() => socket.destroy(), LINGER_MS).unref();
  socket.once("close", () => clearTimeout(drop));
}
