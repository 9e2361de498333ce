import type { FastifyRequest } from "fastify";
import { ResourceError } from "./resource-envelope.js";

const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*)$/i;

/**
 * The RFC 6750 bearer token of a resource request; a missing or malformed header is
 * 401 invalid_token before anything else is looked at. Verification is core's.
 */
export function bearerToken(request: FastifyRequest): string {
  const header = request.headers.authorization;
  const match = typeof header === "string" ? BEARER.exec(header.trim()) : null;
  if (!match) throw new ResourceError(401, "invalid_token", "a bearer access token is required");
  return match[1]!;
}
