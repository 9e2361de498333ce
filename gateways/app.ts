import { uuidv7 } from "../lib/uuidv7.js";
import { MCP_ENDPOINTS } from "../lib/vocabulary.js";
import { type IncomingMessage, STATUS_CODES } from "node:http";
import Fastify, { type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { type CoreClients, unavailable } from "./core-clients.js";
import { partnerGateway } from "./partner/plugin.js";
import { resourceErrorFrom, sendResourceError } from "./partner/resource-envelope.js";
import { partnerParserRefusal } from "./partner/parser-refusals.js";
import { escapeMalformedSegments } from "./partner/malformed-path.js";
import { wellKnownRoutes } from "./wellknown/plugin.js";
import { jsonrpcGateway } from "./jsonrpc/plugin.js";
import { oauthGateway } from "./oauth/plugin.js";
import { webGateway } from "./web/plugin.js";
import { homeRoute } from "./web/home.js";
import { isPagePath, sendBadUrlPage, sendForbiddenOriginPage, sendPageMethodNotAllowed, sendPageNotFound } from "./web/bad-url.js";
import type { PublicUrls } from "./shared/public-urls.js";
import { createOriginGuard, guardedPath } from "./shared/origin-guard.js";
import { applyCors } from "./shared/cors.js";
import { createClientAddress, type TrustProxy } from "./shared/client-address.js";
import { jsonTooDeep, TOO_DEEP } from "./shared/json-depth.js";
import { observeRequests } from "./shared/observability.js";
import { limitRequestTime } from "./shared/request-time.js";
import { trackRouteMethods } from "./shared/route-methods.js";
import { requestLogController } from "./request-log.js";
import { clientErrorHandler, connectRefusal, plainAnswer } from "./shared/client-errors.js";
import { NOT_UTF8, NOT_UTF8_MESSAGE, utf8Text } from "./shared/utf8.js";

export interface GatewayOptions {
  clients: CoreClients;
  logger: Logger;
  /** `{mcp_url}` of the agent tool endpoints, when `urls` is not given (tests). */
  mcpUrl?: string;
  /** Issuer and the four public addresses; enables the agent OAuth and web surfaces. */
  urls?: PublicUrls;
  /** ALLOWED_ORIGINS: further origins (and hosts) browsers and MCP clients may use. */
  allowedOrigins?: readonly string[];
  /** TRUST_PROXY: which X-Forwarded-For / Forwarded entries name the client; default none (the TCP peer). */
  trustProxy?: TrustProxy;
  /** A server span per request (an OpenTelemetry tracer provider must be registered); default off. Metrics are always recorded. */
  tracing?: boolean;
  /** SIGNIN_METHODS: the ways in the sign-in page offers; default e-mail codes. */
  signinMethods?: readonly string[];
  /** Longest time a request's headers and body may take to arrive (408 after); default 30 s. */
  requestTimeoutMs?: number;
}

const MCP_PATHS = new Set(MCP_ENDPOINTS.map((e) => e.path));
const PARTNER_PREFIX = "/api/partner";
const isPartnerPath = (url: string) => url === PARTNER_PREFIX || url.startsWith(`${PARTNER_PREFIX}/`) || url.startsWith(`${PARTNER_PREFIX}?`);
/** A request the gateway cannot read, answered in its surface's envelope (undefined: plain JSON). */
const surfaceRefusal = (target: string, status: number, requestId: string) =>
  isPartnerPath(target) ? partnerParserRefusal(target.slice(PARTNER_PREFIX.length), status, requestId) : undefined;

/** The request line and headers together, in bytes: Node's default, whatever NODE_OPTIONS says. */
const MAX_HEADER_BYTES = 16 * 1024;

/** Builds (does not listen) the one fastify app that serves every public surface. */
export async function buildGateway(options: GatewayOptions): Promise<FastifyInstance> {
  const requestTimeout = options.requestTimeoutMs ?? 30_000;
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    // A client-supplied request id is never trusted (fastify docs, Logging). Time-ordered
    // (UUIDv7), so the audit trail's request-id index grows at its end.
    genReqId: () => uuidv7(),
    // One line per request (gateways/request-log.ts) instead of fastify's two.
    logController: requestLogController(),
    // The smallest limit any route allows; routes raise it where the contract does.
    bodyLimit: 64 * 1024,
    // The onRequest hook below answers requests that arrive while closing, in each surface's envelope.
    return503OnClosing: false,
    // fastify's default of none let a client that never finished its headers hold a connection.
    requestTimeout,
    // Node's own limit, stated so the router's below cannot fall under it: a longer request line is a 431.
    // A missing Host is refused by the onRequest hook below: Node's own 400 has no request id.
    http: { connectionsCheckingInterval: Math.min(requestTimeout / 2, 15_000), maxHeaderSize: MAX_HEADER_BYTES, requireHostHeader: false },
    // No path parameter can outgrow the request line, so the router never refuses one for length:
    // each route checks its own parameters (partner routes after the caller's checks, audited).
    routerOptions: { maxParamLength: MAX_HEADER_BYTES },
    // A request the HTTP parser refuses (headers over the limit, unreadable) still gets a request
    // id, and on the partner API its envelope.
    clientErrorHandler: clientErrorHandler(options.logger as FastifyBaseLogger, surfaceRefusal),
    // A partner path the router could not decode reaches its route, which refuses it after the caller's checks.
    rewriteUrl: (req: IncomingMessage) => (isPartnerPath(req.url ?? "") ? escapeMalformedSegments(req) : (req.url ?? "/")),
    // Router refusals (malformed percent-encoding) happen before any plugin: pages get an HTML
    // page, the partner API its envelope (should one pass rewriteUrl), other paths fastify's JSON.
    frameworkErrors: (err, request, reply) => {
      if (options.urls && isPagePath(request.url)) return sendBadUrlPage(request, reply);
      if (isPartnerPath(request.url)) return sendResourceError(request, reply.header("x-request-id", request.id), resourceErrorFrom(err));
      return sendFrameworkJson(err, request, reply);
    },
  });

  app.server.on("connect", connectRefusal(options.logger as FastifyBaseLogger));
  // Node answers an Expect other than 100-continue with a bare 417 (no request id, no envelope);
  // RFC 9110 lets a server ignore it, so the request is served like any other.
  app.server.on("checkExpectation", (req, res) => app.server.emit("request", req, res));
  limitRequestTime(app, requestTimeout);
  trackRouteMethods(app);

  // fastify's own JSON parser (pages, unknown paths), behind the depth check every JSON
  // surface makes; the partner, JSON-RPC and OAuth surfaces parse in their own envelopes.
  const defaultJson = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (request, body, done) => {
    const text = utf8Text(body as Buffer);
    if (text === NOT_UTF8) return done(badBodyError(NOT_UTF8_MESSAGE), undefined);
    if (jsonTooDeep(text)) return done(badBodyError(TOO_DEEP), undefined);
    defaultJson(request, text, done);
  });

  // Computed when a route asks (per-address limits), never for other requests.
  const clientAddressOf = createClientAddress(options.trustProxy ?? false);
  app.decorateRequest("clientAddress", {
    getter(this: FastifyRequest) {
      return clientAddressOf(this.socket.remoteAddress, this.headers);
    },
  });

  // Callback style, not async: this runs on every request, and an async hook costs a
  // promise and a microtask turn each time.
  const mcpUrl = options.mcpUrl ?? options.urls?.mcpUrl ?? "http://127.0.0.1";
  const guard = createOriginGuard(options.urls ?? { issuer: mcpUrl, baseUrl: mcpUrl, authUrl: mcpUrl, appUrl: mcpUrl, mcpUrl }, options.allowedOrigins);
  let closing = false;
  app.addHook("preClose", (done) => {
    closing = true;
    done();
  });
  app.addHook("onRequest", (request, reply, done) => {
    reply.header("x-request-id", request.id);
    reply.header("x-content-type-options", "nosniff");
    if (closing) {
      reply.header("connection", "close").header("retry-after", "1");
      return done(shuttingDown());
    }
    // RFC 9112 3.2: an HTTP/1.1 request without Host is a 400, answered as a parser refusal is.
    if (request.raw.httpVersion === "1.1" && !request.headers.host) {
      const answer = surfaceRefusal(request.url, 400, request.id) ?? plainAnswer(400);
      reply.code(answer.status).headers({ "cache-control": "no-store", pragma: "no-cache", connection: "close" });
      reply.type("application/json").send(answer.body);
      return;
    }
    // DNS-rebinding and cross-site protection: on MCP and state-changing browser or registration
    // endpoints Host and any Origin must be ours (server-to-server endpoints carry no browser
    // credentials), judged on the decoded, normalized path so `/%6dcp/write` cannot slip past.
    const path = guardedPath(request.url);
    const mcp = MCP_PATHS.has(path);
    const browserWrite = request.method === "POST" && (path === "/oauth2/register" || (options.urls !== undefined && isPagePath(path)));
    if ((mcp || browserWrite) && (!guard.hostAllowed(request.headers.host) || !guard.originAllowed(request.headers.origin, request.headers.host))) {
      request.log.info({ host: request.headers.host, origin: request.headers.origin }, "refused a request from a foreign Host or Origin");
      if (mcp) {
        const body = {
          jsonrpc: "2.0",
          id: null,
          error: { code: -32600, message: "Forbidden: Host or Origin not allowed", data: { reason_id: "origin_not_allowed", request_id: request.id } },
        };
        reply.code(403).header("cache-control", "no-store").type("application/json").send(JSON.stringify(body));
      } else if (path === "/oauth2/register") {
        reply.code(403).header("cache-control", "no-store").send({ error: "access_denied", error_description: "Host or Origin not allowed" });
      } else {
        sendForbiddenOriginPage(reply);
      }
      return;
    }
    if (applyCors(request, reply, path, mcp, guard)) return;
    done();
  });
  observeRequests(app, { tracing: options.tracing ?? false });

  // Unknown addresses: a page under the page prefixes, fastify's own JSON elsewhere (the
  // partner and JSON-RPC surfaces answer their own prefixes in their own envelopes).
  app.setNotFoundHandler((request, reply) => {
    const allowed = app.allowedMethods(request.url).join(", ");
    if (allowed) return sendMethodNotAllowed(request, reply, allowed, options.urls !== undefined);
    if (options.urls && isPagePath(request.url)) return sendPageNotFound(request, reply);
    return reply.code(404).send({ message: `Route ${request.method}:${request.url} not found`, error: "Not Found", statusCode: 404 });
  });

  await app.register(wellKnownRoutes, { clients: options.clients });
  await app.register(partnerGateway, {
    prefix: PARTNER_PREFIX,
    clients: options.clients,
    realm: "vaultgate-partner",
  });
  if (options.urls) {
    await app.register(oauthGateway, {
      grants: options.clients.grants,
      urls: options.urls,
      realm: "vaultgate-oauth",
    });
    await app.register(webGateway, {
      grants: options.clients.grants,
      budgets: options.clients.budgets,
      urls: options.urls,
      signinMethods: options.signinMethods,
    });
    await app.register(homeRoute, { urls: options.urls });
  }
  await app.register(jsonrpcGateway, { clients: options.clients, mcpUrl });
  return app;
}

/** Bad input, not a bug: fastify logs a 4xx error's fields, and this one has no stack to show. */
function badBodyError(message: string): Error {
  const err = Object.assign(new Error(message), { statusCode: 400, code: "FST_ERR_CTP_INVALID_JSON_BODY" });
  delete err.stack;
  return err;
}

/** A known path asked with a method it does not answer, with `Allow`; each surface keeps its envelope. */
function sendMethodNotAllowed(request: FastifyRequest, reply: FastifyReply, allowed: string, pages: boolean): FastifyReply {
  const path = request.url.split("?", 1)[0]!;
  reply.header("allow", allowed);
  if (pages && isPagePath(path)) return sendPageMethodNotAllowed(request, reply);
  reply.code(405).header("cache-control", "no-store");
  // Streamable HTTP: the MCP endpoints open no server-to-client stream.
  if (MCP_PATHS.has(path)) return reply.send();
  const message = `${path} answers ${allowed} only`;
  if (path.startsWith("/oauth2/")) return reply.send({ error: "invalid_request", error_description: message });
  return reply.send({ error: STATUS_CODES[405], message, statusCode: 405 });
}

/** The body fastify itself sends for a router refusal when `frameworkErrors` is unset. */
function sendFrameworkJson(err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const statusCode = err.statusCode ?? 400;
  reply.header("x-request-id", request.id);
  return reply.code(statusCode).send({ error: STATUS_CODES[statusCode], code: err.code, message: err.message, statusCode });
}

/** A request that reached a closing gateway: the retryable outage every surface renders as its own 503. */
function shuttingDown(): Error {
  const err = unavailable("the gateway is shutting down; retry", 1);
  // For paths no surface owns, fastify's own handler answers by this status.
  return Object.assign(err, { statusCode: 503 });
}
