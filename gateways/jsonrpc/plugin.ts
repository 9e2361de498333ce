import { randomBytes } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { CoreClients } from "../core-clients.js";
import { jsonTooDeep, TOO_DEEP } from "../shared/json-depth.js";
import { inexactAsNaN, markInexactNumbers } from "../shared/json-numbers.js";
import { repeatedMember, repeatedMemberMessage } from "../shared/json-members.js";
import { refuseEncodedBodies } from "../shared/content-encoding.js";
import { MCP_CATEGORY_SCOPES, MCP_ENDPOINTS } from "../../lib/vocabulary.js";
import { createDispatcher, errorReply, isObject, PROTOCOL_VERSIONS, type Caller, type Reply } from "./dispatch.js";
import { RpcCode, RpcError, rpcErrorFrom } from "./envelope.js";
import { createSessionCodec } from "./session.js";
import type { Category } from "./tools.js";
import { NOT_UTF8, NOT_UTF8_MESSAGE, utf8Parser } from "../shared/utf8.js";

export { PROTOCOL_VERSIONS } from "./dispatch.js";

export interface JsonRpcGatewayOptions {
  clients: CoreClients;
  /** `{mcp_url}`: named in the 401 challenge's resource_metadata. */
  mcpUrl: string;
  serverVersion?: string;
  /** Signs stateless Mcp-Session-Id values; default: clients.mcpSessionKey, else per process. */
  sessionKey?: Uint8Array;
}

const BODY_LIMIT = 64 * 1024;
/**
 * Calls one batch may carry. Each element is a full call (authorized afresh, often a
 * write), so a bigger batch is refused whole before any element runs.
 */
export const MAX_BATCH_CALLS = 20;
/** MCP-Protocol-Version values: a date (malformed otherwise). */
const VERSION_SHAPE = /^\d{4}-\d{2}-\d{2}$/;

/**
 * JSON-RPC 2.0 / MCP agent tools on `{mcp_url}` over Streamable HTTP with JSON responses.
 * This file is the HTTP transport (body, headers, batches, status); dispatch.ts answers each message.
 */
export async function jsonrpcGateway(app: FastifyInstance, options: JsonRpcGatewayOptions) {
  const { clients } = options;
  const sessions = createSessionCodec(options.sessionKey ?? clients.mcpSessionKey ?? randomBytes(32));
  const { handleOne } = createDispatcher({ clients, mcpUrl: options.mcpUrl, serverVersion: options.serverVersion, sessions });
  // RFC 9728 5.1 / RFC 6750 3: each endpoint points at its own metadata and names only the
  // scopes its tools need, so clients ask for no more; a presented token that failed
  // verification also gets error="invalid_token", one lacking a scope error="insufficient_scope".
  const challenges = new Map(
    MCP_ENDPOINTS.map(({ path, category }) => {
      const base = `Bearer resource_metadata="${options.mcpUrl}/.well-known/oauth-protected-resource${path}", scope="${MCP_CATEGORY_SCOPES[category].join(" ")}"`;
      return [path, { missing: base, invalid: `${base}, error="invalid_token"`, scope: `${base}, error="insufficient_scope"` }];
    }),
  );

  // The raw text, so unparsable JSON becomes -32700 rather than a framework error; every
  // other content type (text/plain included) is refused with 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "buffer", bodyLimit: BODY_LIMIT }, utf8Parser);
  app.addContentTypeParser("*", { parseAs: "string", bodyLimit: BODY_LIMIT }, (_req, _body, done) => done(null, NOT_JSON));

  // A compressed body: the wrong content type's 415, its message naming the coding.
  app.addHook(
    "onRequest",
    refuseEncodedBodies((message) => new EncodingRefused(RpcCode.INVALID_REQUEST, `Invalid Request: ${message}`, { reason_id: "unsupported_media_type" })),
  );
  app.setErrorHandler((err: unknown, request, reply) => {
    if (err instanceof EncodingRefused) return send(reply, 415, [errorReply(null, err, request.id)]);
    const status = (err as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      return send(reply, status, [
        errorReply(
          null,
          new RpcError(RpcCode.INVALID_REQUEST, "Invalid Request", { reason_id: status === 413 ? "body_too_large" : "invalid_request" }),
          request.id,
        ),
      ]);
    }
    // A request the closing gateway turned away before dispatch: the outage's -32603, as a 503.
    if (status === 503) return send(reply, 503, [errorReply(null, rpcErrorFrom(err), request.id)]);
    request.log.error({ err }, "json-rpc gateway failure");
    return send(reply, 500, [errorReply(null, new RpcError(RpcCode.INTERNAL_ERROR, "Internal error", { reason_id: "internal_error" }), request.id)]);
  });

  for (const { path, category } of MCP_ENDPOINTS) {
    // Streamable HTTP: no server-to-client stream and no session, so GET and DELETE are 405 (gateways/app.ts).
    app.post(path, { bodyLimit: BODY_LIMIT }, (request, reply) => handle(request, reply, category, path));
  }

  async function handle(request: FastifyRequest, reply: FastifyReply, category: Category, path: string) {
    const caller: Caller = {
      request,
      requestId: request.id,
      bearer: bearerOf(request.headers.authorization),
      unauthorized: false,
      urlElicitation: sessions.read(request.headers["mcp-session-id"])?.urlElicitation ?? false,
    };
    if (request.body === NOT_JSON) {
      const e = new RpcError(RpcCode.INVALID_REQUEST, "Invalid Request", { reason_id: "unsupported_media_type" });
      return send(reply, 415, [errorReply(null, e, request.id)]);
    }
    if (request.body === NOT_UTF8) {
      const e = new RpcError(RpcCode.PARSE_ERROR, `Parse error: ${NOT_UTF8_MESSAGE}`, { reason_id: "parse_error" });
      return send(reply, 200, [errorReply(null, e, request.id)]);
    }
    let parsed: unknown;
    const text = typeof request.body === "string" ? request.body : "";
    try {
      if (jsonTooDeep(text)) throw new SyntaxError(TOO_DEEP);
      const marked = markInexactNumbers(text);
      parsed = marked === text ? JSON.parse(text) : JSON.parse(marked, reviveInexact);
    } catch {
      return send(reply, 200, [errorReply(null, new RpcError(RpcCode.PARSE_ERROR, "Parse error", { reason_id: "parse_error" }), request.id)]);
    }
    const repeated = repeatedMember(text);
    if (repeated !== undefined) {
      const e = new RpcError(RpcCode.INVALID_REQUEST, `Invalid Request: ${repeatedMemberMessage(repeated)}`, { reason_id: "invalid_request" });
      return send(reply, 200, [errorReply(null, e, request.id)]);
    }
    const batch = Array.isArray(parsed);
    const messages = batch ? (parsed as unknown[]) : [parsed];
    // MCP transport: a version the client claims must be one we speak (400 otherwise); a
    // missing header is accepted. initialize itself negotiates, so it is exempt.
    const version = request.headers["mcp-protocol-version"];
    if (version !== undefined && !messages.every(isInitialize)) {
      const v = Array.isArray(version) ? version.at(-1)! : version;
      if (!PROTOCOL_VERSIONS.includes(v)) {
        const why = VERSION_SHAPE.test(v) ? "unsupported" : "malformed";
        const e = new RpcError(RpcCode.INVALID_REQUEST, `Bad Request: ${why} MCP-Protocol-Version (supported: ${PROTOCOL_VERSIONS.join(", ")})`, {
          reason_id: "unsupported_protocol_version",
          supported: PROTOCOL_VERSIONS,
        });
        return send(reply, 400, [errorReply(null, e, request.id)]);
      }
    }
    if (batch && messages.length === 0) {
      return send(reply, 200, [errorReply(null, new RpcError(RpcCode.INVALID_REQUEST, "Invalid Request", { reason_id: "invalid_request" }), request.id)]);
    }
    if (messages.length > MAX_BATCH_CALLS) {
      const e = new RpcError(RpcCode.INVALID_REQUEST, `Invalid Request: a batch may hold at most ${MAX_BATCH_CALLS} calls`, {
        reason_id: "batch_too_large",
        max_batch_calls: MAX_BATCH_CALLS,
      });
      return send(reply, 200, [errorReply(null, e, request.id)]);
    }
    const replies: Reply[] = [];
    for (const raw of messages) {
      const r = await handleOne(raw, category, caller);
      if (r) replies.push(r);
    }
    // A batch in which a call took effect answers 200, so a client that drops 401 bodies keeps its results (a rotated refresh token).
    const tookEffect = replies.some((r) => "result" in r);
    const challenge = challenges.get(path)!;
    // RFC 6750 3.1 / MCP scope challenges: a grant too narrow is 403 naming the endpoint's scopes, so a client can re-authorize for them.
    const forbidden = caller.insufficientScope && !caller.unauthorized;
    const status = caller.unauthorized && !tookEffect ? 401 : forbidden && !tookEffect ? 403 : replies.length === 0 ? 202 : 200;
    if (caller.unauthorized) reply.header("www-authenticate", caller.bearer ? challenge.invalid : challenge.missing);
    else if (forbidden) reply.header("www-authenticate", challenge.scope);
    if (caller.issuedSession) reply.header("mcp-session-id", caller.issuedSession);
    if (replies.length === 0) return reply.code(status).send();
    return send(reply, status, batch ? replies : [replies[0]!], batch);
  }
}

const NOT_JSON = Symbol("not json");

/** The JSON-RPC error of a body in a content coding the gateway does not decode. */
class EncodingRefused extends RpcError {}

function isInitialize(raw: unknown): boolean {
  return isObject(raw) && raw.method === "initialize";
}

function bearerOf(header: string | undefined): string | undefined {
  const m = /^Bearer +([A-Za-z0-9\-._~+/]+=*)$/i.exec(header ?? "");
  return m?.[1];
}

function send(reply: FastifyReply, status: number, replies: Reply[], batch = false) {
  return reply
    .code(status)
    .header("cache-control", "no-store")
    .type("application/json")
    .send(JSON.stringify(batch ? replies : replies[0]));
}

/** A message's inexact id stays a marker, so its refusal can quote the numeral; any other becomes NaN. */
function reviveInexact(this: Record<string, unknown>, key: string, value: unknown): unknown {
  return key === "id" && (Object.hasOwn(this, "jsonrpc") || Object.hasOwn(this, "method")) ? value : inexactAsNaN(key, value);
}
