import type { FastifyReply, FastifyRequest } from "fastify";

/** A media type as fastify reads one (`type/subtype`, parameters after `;`). */
const MEDIA_TYPE = /^\s*[\w!#$%&'*+.^`|~-]+\/[\w!#$%&'*+.^`|~-]+\s*(?:;|$)/;

/**
 * onRequest hook: a Content-Type that names no media type (empty, blank, `json`) labels nothing,
 * so the body is refused like an unlabelled one, after the caller's checks, not as a bare 415.
 */
export function dropEmptyContentType(request: FastifyRequest, _reply: FastifyReply, done: () => void) {
  const type = request.headers["content-type"];
  if (type !== undefined && !MEDIA_TYPE.test(type)) delete request.headers["content-type"];
  done();
}
