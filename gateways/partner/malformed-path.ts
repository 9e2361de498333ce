import type { IncomingMessage } from "node:http";
import type { FastifyRequest } from "fastify";

/** Requests whose path held a segment that is not percent-encoded UTF-8 (`%E0%A4%A`, `%ZZ`). */
const malformed = new WeakSet<IncomingMessage>();

/** The refusal such a path gets from the route, once the caller's checks have passed. */
export const MALFORMED_PATH = "the path is not valid percent-encoded UTF-8";

/**
 * For fastify's `rewriteUrl`: a partner path the router could not decode has each malformed
 * segment's `%` escaped, so the route it names still runs its checks in the documented order
 * (bearer, caller, then shape) and refuses the path as a shape problem, audited.
 */
export function escapeMalformedSegments(req: IncomingMessage): string {
  const url = req.url ?? "/";
  const end = pathEnd(url);
  const path = url.slice(0, end);
  if (!path.includes("%")) return url;
  let found = false;
  const segments = path.split("/").map((segment) => {
    if (!segment.includes("%") || decodes(segment)) return segment;
    found = true;
    return segment.replaceAll("%", "%25");
  });
  if (!found) return url;
  malformed.add(req);
  return segments.join("/") + url.slice(end);
}

/** Whether the request's path was escaped by escapeMalformedSegments. */
export const hasMalformedPath = (request: FastifyRequest) => malformed.has(request.raw);

function pathEnd(url: string): number {
  const query = url.indexOf("?");
  const hash = url.indexOf("#");
  if (query < 0) return hash < 0 ? url.length : hash;
  return hash < 0 ? query : Math.min(query, hash);
}

function decodes(segment: string): boolean {
  try {
    decodeURIComponent(segment);
    return true;
  } catch {
    return false;
  }
}
