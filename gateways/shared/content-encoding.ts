import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from "fastify";

/** An RFC 9110 token: only such a coding name is quoted back in the refusal. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]{1,32}$/;

/**
 * The first content coding named by a request's Content-Encoding other than `identity`
 * (any case), or undefined: an absent header, `identity` and empty list members are accepted.
 */
function unsupportedContentEncoding(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  for (const member of header.split(",")) {
    const coding = member.trim().toLowerCase();
    if (coding !== "" && coding !== "identity") return coding;
  }
  return undefined;
}

/** The refusal's text: which coding, and what to send instead. */
function contentEncodingMessage(coding: string): string {
  const named = TOKEN.test(coding) ? `Content-Encoding ${coding}` : "this Content-Encoding";
  return `${named} is not supported; send the body uncompressed (identity)`;
}

/** Whether the request carries a body (a length above zero, or chunked framing). */
function hasBody(request: FastifyRequest): boolean {
  const length = request.headers["content-length"];
  return request.headers["transfer-encoding"] !== undefined || (length !== undefined && length.trim() !== "0");
}

/**
 * An onRequest hook refusing, before it is read, a body in a content coding this server does not
 * decode (RFC 9110 15.5.16: 415, with `Accept-Encoding: identity`). `refusal` makes the error the
 * surface's own error handler renders in its envelope; the message names the coding.
 */
export function refuseEncodedBodies(refusal: (message: string, request: FastifyRequest) => Error) {
  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const coding = hasBody(request) ? unsupportedContentEncoding(request.headers["content-encoding"]) : undefined;
    if (coding === undefined) {
      done();
      return;
    }
    reply.header("accept-encoding", "identity");
    done(refusal(contentEncodingMessage(coding), request));
  };
}
