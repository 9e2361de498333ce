import type { FastifyReply, FastifyRequest } from "fastify";
import type { OriginGuard } from "./origin-guard.js";

/** Public metadata documents: any page may read them (they hold nothing private). */
const PUBLIC_DOCUMENTS = /^\/\.well-known\/(oauth-authorization-server|oauth-protected-resource(\/.*)?|agent-jwks\.json)$/;
/** Endpoints a browser-based MCP host calls with a bearer token or client credentials, never cookies. */
const OAUTH_ENDPOINTS = new Set(["/oauth2/register", "/oauth2/token", "/oauth2/revoke"]);
const ALLOW_HEADERS = "Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Session-Id, Last-Event-ID";
const EXPOSE_HEADERS = "Mcp-Session-Id, WWW-Authenticate, X-Request-Id, Retry-After";

/**
 * CORS for browser MCP hosts on an allowed origin: MCP and OAuth JSON endpoints (header auth, never
 * cookies, so no credentials mode); metadata documents for any origin. True when it answered a preflight.
 */
export function applyCors(request: FastifyRequest, reply: FastifyReply, path: string, mcp: boolean, guard: OriginGuard): boolean {
  const origin = request.headers.origin;
  if (origin === undefined) return false;
  const isPublic = PUBLIC_DOCUMENTS.test(path);
  if (!isPublic && !mcp && !OAUTH_ENDPOINTS.has(path)) return false;
  if (!isPublic && !(guard.hostAllowed(request.headers.host) && guard.originAllowed(origin, request.headers.host))) return false;
  reply.header("access-control-allow-origin", isPublic ? "*" : origin);
  if (!isPublic) reply.header("vary", "Origin");
  reply.header("access-control-expose-headers", EXPOSE_HEADERS);
  if (request.method !== "OPTIONS" || request.headers["access-control-request-method"] === undefined) return false;
  reply
    .code(204)
    .header("access-control-allow-methods", isPublic ? "GET" : "POST")
    .header("access-control-allow-headers", ALLOW_HEADERS)
    .header("access-control-max-age", "600")
    .send();
  return true;
}
