import { randomBytes } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { withRequestId, type CoreClients } from "../core-clients.js";
import { RpcCode, RpcError, rpcErrorFrom, type RpcId } from "./envelope.js";
import { compileToolSchemas, describeErrors } from "./schemas.js";
import { TOOLS, type Category, type Tool } from "./tools.js";
import { MCP_ENDPOINT_SCOPES } from "../shared/public-urls.js";
import { createSessionCodec, declaresUrlElicitation, URL_ELICITATION_SINCE } from "./session.js";
import { noteRefusal } from "../request-log.js";
import { jsonTooDeep, TOO_DEEP } from "../shared/json-depth.js";

export interface JsonRpcGatewayOptions {
  clients: CoreClients;
  /** `{mcp_url}`: named in the 401 challenge's resource_metadata. */
  mcpUrl: string;
  serverVersion?: string;
  /** Signs stateless Mcp-Session-Id values; default: clients.mcpSessionKey, else per process. */
  sessionKey?: Uint8Array;
}

/** DESIGN 4.1: one endpoint per category; `/write` is spec 4.5's address for the write category. */
const ENDPOINTS: Record<string, Category> = { "/mcp/read": "read", "/mcp/write": "write", "/write": "write", "/mcp/treasury": "treasury" };
/** MCP revisions we speak, newest first; a client asking for another one gets the newest. */
export const PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"];
const BODY_LIMIT = 64 * 1024;
/**
 * Calls one batch may carry. Each element is a full call (authorized afresh, often a
 * write), so a bigger batch is refused whole before any element runs.
 */
export const MAX_BATCH_CALLS = 20;
const ENVELOPE_KEYS = new Set(["jsonrpc", "id", "method", "params"]);
/** MCP-Protocol-Version values: a date (malformed otherwise). */
const VERSION_SHAPE = /^\d{4}-\d{2}-\d{2}$/;
/**
 * Inside tools/call, these stay JSON-RPC errors: they say who is calling, where, or that
 * the server failed, not what the tool decided. Every other refusal (arguments, policy,
 * funds, idempotency, rate limits, contention, a failed provisioning) is a tool result
 * with isError, so the model sees why (MCP 2025-11-25).
 */
const PROTOCOL_REASONS = new Set([
  "invalid_token",
  "insufficient_scope",
  "wrong_endpoint",
  "unknown_tool",
  "method_not_found",
  "invalid_request",
  "parse_error",
  "internal_error",
  "temporarily_unavailable",
  "auth_unavailable",
  "audit_unavailable",
  // -32042: MCP defines URL elicitation as a protocol error the client acts on, not a result.
  "step_up_required",
]);

interface Message {
  id: RpcId;
  notification: boolean;
  method: string;
  params: unknown;
}

type Reply = { jsonrpc: "2.0"; id: RpcId; result: unknown } | { jsonrpc: "2.0"; id: RpcId; error: unknown };

/**
 * What a call runs as: the bearer as presented. The gateway never decides what a token
 * allows: each batch element hands the raw token to core, which verifies it and reads
 * its grant afresh for that element alone.
 */
interface Caller {
  /** The HTTP request (its log line names core's refusals, noteRefusal). */
  request: FastifyRequest;
  requestId: string;
  bearer: string | undefined;
  unauthorized: boolean;
  /** The client said on initialize that it shows URL elicitations (its Mcp-Session-Id). */
  urlElicitation: boolean;
  /** The Mcp-Session-Id an initialize in this request negotiated. */
  issuedSession?: string;
}

/** JSON-RPC 2.0 / MCP (Streamable HTTP, JSON responses) agent tools on `{mcp_url}` (spec 4.1, 4.5, 7.1; DESIGN 4.1). */
export async function jsonrpcGateway(app: FastifyInstance, options: JsonRpcGatewayOptions) {
  const { clients } = options;
  const validators = compileToolSchemas(TOOLS);
  const toolsByName = new Map(TOOLS.map((t) => [t.name, t]));
  const sessions = createSessionCodec(options.sessionKey ?? clients.mcpSessionKey ?? randomBytes(32));
  // RFC 9728 5.1 / RFC 6750 3: each endpoint points at its own metadata and names only the
  // scopes its tools need, so clients ask for no more; a presented token that failed
  // verification also gets error="invalid_token".
  const challenges = new Map(
    Object.entries(ENDPOINTS).map(([path]) => {
      const base = `Bearer resource_metadata="${options.mcpUrl}/.well-known/oauth-protected-resource${path}", scope="${MCP_ENDPOINT_SCOPES[path]!.join(" ")}"`;
      return [path, { missing: base, invalid: `${base}, error="invalid_token"` }];
    }),
  );
  const toolLists = new Map<Category, unknown[]>(
    (["read", "write", "treasury"] as const).map((c) => [c, TOOLS.filter((t) => t.category === c).map(describeTool)]),
  );

  // The raw text, so unparsable JSON becomes -32700 rather than a framework error; every
  // other content type (text/plain included) is refused with 415.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "string", bodyLimit: BODY_LIMIT }, (_req, body, done) => done(null, body));
  app.addContentTypeParser("*", { parseAs: "string", bodyLimit: BODY_LIMIT }, (_req, _body, done) => done(null, NOT_JSON));

  app.setErrorHandler((err: unknown, request, reply) => {
    const status = (err as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      return send(reply, status, [errorReply(null, new RpcError(RpcCode.INVALID_REQUEST, "Invalid Request", { reason_id: status === 413 ? "body_too_large" : "invalid_request" }), request.id)]);
    }
    request.log.error({ err }, "json-rpc gateway failure");
    return send(reply, 500, [errorReply(null, new RpcError(RpcCode.INTERNAL_ERROR, "Internal error", { reason_id: "internal_error" }), request.id)]);
  });

  for (const [path, category] of Object.entries(ENDPOINTS)) {
    app.post(path, { bodyLimit: BODY_LIMIT }, (request, reply) => handle(request, reply, category, path));
    // Streamable HTTP: we open no server-to-client stream and keep no session.
    app.route({ method: ["GET", "DELETE"], url: path, handler: (_req, reply) => reply.code(405).header("allow", "POST").send() });
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
    let parsed: unknown;
    try {
      const text = typeof request.body === "string" ? request.body : "";
      if (jsonTooDeep(text)) throw new SyntaxError(TOO_DEEP);
      parsed = JSON.parse(text);
    } catch {
      return send(reply, 200, [errorReply(null, new RpcError(RpcCode.PARSE_ERROR, "Parse error", { reason_id: "parse_error" }), request.id)]);
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
    const status = caller.unauthorized ? 401 : replies.length === 0 ? 202 : 200;
    if (caller.unauthorized) reply.header("www-authenticate", caller.bearer ? challenges.get(path)!.invalid : challenges.get(path)!.missing);
    if (caller.issuedSession) reply.header("mcp-session-id", caller.issuedSession);
    if (replies.length === 0) return reply.code(status).send();
    return send(reply, status, batch ? replies : [replies[0]!], batch);
  }

  async function handleOne(raw: unknown, category: Category, caller: Caller): Promise<Reply | undefined> {
    // A response sent by the client (to a request we never make): accepted and ignored
    // like a notification, never answered (MCP transport: 202, not an error reply).
    if (isResponse(raw)) return undefined;
    const envelope = readEnvelope(raw);
    if ("error" in envelope) return errorReply(envelope.id, envelope.error, caller.requestId);
    const msg = envelope.message;
    try {
      const result = await dispatch(msg, category, caller);
      return msg.notification ? undefined : { jsonrpc: "2.0", id: msg.id, result };
    } catch (err) {
      noteRefusal(caller.request, err);
      const e = rpcErrorFrom(err);
      if (e.unauthorized) caller.unauthorized = true;
      return msg.notification ? undefined : errorReply(msg.id, e, caller.requestId);
    }
  }

  async function dispatch(msg: Message, category: Category, caller: Caller): Promise<unknown> {
    // Which tool (if any) the message names decides whether the bearer is needed:
    // agent.grant.refresh authenticates with its own params (DESIGN 4.1).
    const toolName = msg.method === "tools/call" ? nameOf(msg.params) : toolsByName.has(msg.method) ? msg.method : undefined;
    const tool = toolName === undefined ? undefined : toolsByName.get(toolName);
    if (tool?.auth !== "none" && !caller.bearer) unauthorized(caller);

    switch (msg.method) {
      case "initialize":
        await authenticate(caller);
        return initialize(msg.params, caller);
      case "ping":
        await authenticate(caller);
        return {};
      case "tools/list":
        await authenticate(caller);
        return { tools: toolLists.get(category) };
      case "tools/call": {
        const params = objectParams(msg.params);
        if (typeof params.name !== "string") return refuse(caller, invalidParams("params.name must be a tool name"));
        const args = params.arguments === undefined ? {} : params.arguments;
        if (!isObject(args)) return refuse(caller, invalidParams("params.arguments must be an object"));
        let result: Record<string, unknown>;
        try {
          result = await callTool(routeTool(params.name, category, true, caller), args, caller);
        } catch (err) {
          noteRefusal(caller.request, err);
          const e = rpcErrorFrom(err);
          if (e.unauthorized || PROTOCOL_REASONS.has(String(e.data.reason_id))) throw e;
          return toolError(e, caller.requestId);
        }
        return { content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result, isError: false };
      }
      default:
        if (msg.method.startsWith("notifications/") && msg.notification) return authenticate(caller);
        return callTool(routeTool(msg.method, category, false, caller), objectParams(msg.params), caller);
    }
  }

  /** routeTool, but a refusal made before core saw the token is preceded by the token's own check. */
  function routeTool(name: string, category: Category, viaToolsCall: boolean, caller: Caller): Tool | Promise<never> {
    const tool = toolsByName.get(name);
    if (!tool) {
      // MCP: an unknown tool in tools/call is invalid params; an unknown method is -32601.
      if (viaToolsCall) return refuse(caller, new RpcError(RpcCode.INVALID_PARAMS, `Unknown tool: ${name}`, { reason_id: "unknown_tool" }));
      return refuse(caller, new RpcError(RpcCode.METHOD_NOT_FOUND, "Method not found", { reason_id: "method_not_found" }));
    }
    if (tool.category !== category) {
      return refuse(caller, new RpcError(RpcCode.METHOD_NOT_FOUND, `${name} is served at /mcp/${tool.category}`, { reason_id: "wrong_endpoint", endpoint: `${options.mcpUrl}/mcp/${tool.category}` }), tool);
    }
    return tool;
  }

  async function callTool(routed: Tool | Promise<never>, args: Record<string, unknown>, caller: Caller) {
    const tool = await routed;
    const v = validators.get(tool.name)!;
    if (!v.input(args)) return refuse(caller, new RpcError(RpcCode.INVALID_PARAMS, "Invalid params", { reason_id: "invalid_params", errors: describeErrors(v.input.errors) }), tool);
    // Core verifies the token and reads the grant inside the call that acts on it.
    const result = await tool.call(args, { clients, requestId: caller.requestId, clientAddress: caller.request.clientAddress, accessToken: caller.bearer ?? "" });
    // Results conform to their outputSchema; a mismatch is our bug, never the caller's.
    if (!v.output(result)) throw new Error(`${tool.name} result does not match its outputSchema: ${JSON.stringify(describeErrors(v.output.errors))}`);
    // A client that shows URL elicitations gets the browser step as -32042 (MCP
    // 2025-11-25) and retries the same call once the user has completed it.
    const elicitation = caller.urlElicitation ? tool.urlElicitation?.(result) : undefined;
    if (elicitation) {
      throw new RpcError(RpcCode.URL_ELICITATION_REQUIRED, "URL elicitation required: the account owner must approve in their browser", {
        reason_id: "step_up_required",
        elicitations: [elicitation],
      });
    }
    return result;
  }

  function unauthorized(caller: Caller): never {
    caller.unauthorized = true;
    throw new RpcError(RpcCode.UNAUTHORIZED, "Unauthorized", { reason_id: "invalid_token" }, true);
  }

  /**
   * Verifies the bearer in core for calls that do not reach core with it (protocol
   * methods and refusals made here), so a bad token is answered 401 before anything else,
   * as when core sees it. Each call verifies afresh: nothing is shared across a batch.
   */
  async function authenticate(caller: Caller): Promise<void> {
    if (!caller.bearer) unauthorized(caller);
    await clients.grants.verifyAgentToken({ accessToken: caller.bearer }, withRequestId(caller.requestId));
  }

  /** Refuses a call with `error`, unless its bearer is itself refused (401 comes first). */
  async function refuse(caller: Caller, error: RpcError, tool?: Tool): Promise<never> {
    if (tool?.auth !== "none") await authenticate(caller);
    throw error;
  }

  function initialize(params: unknown, caller: Caller) {
    const p = objectParams(params);
    if (typeof p.protocolVersion !== "string") throw invalidParams("params.protocolVersion is required");
    const version = PROTOCOL_VERSIONS.includes(p.protocolVersion) ? p.protocolVersion : PROTOCOL_VERSIONS[0]!;
    // Stateless: what the client can show travels back with it in the signed session id.
    const urlElicitation = version >= URL_ELICITATION_SINCE && declaresUrlElicitation(p.capabilities);
    caller.issuedSession = sessions.issue({ protocolVersion: version, urlElicitation });
    return {
      protocolVersion: version,
      capabilities: { tools: { listChanged: false } },
      serverInfo: { name: "vaultgate", version: options.serverVersion ?? "0.1.0" },
    };
  }
}

const NOT_JSON = Symbol("not json");

/**
 * A refusal inside tools/call as a tool result the model can read (isError). It has no
 * structuredContent: that field belongs to the tool's outputSchema (clients validate it
 * when present), so the error travels as JSON text and in _meta.
 */
function toolError(e: RpcError, requestId: string) {
  const error = e.body(requestId);
  return { content: [{ type: "text", text: JSON.stringify({ error }) }], isError: true, _meta: { error } };
}

function describeTool(t: Tool) {
  return {
    name: t.name,
    title: t.title,
    description: t.description,
    inputSchema: t.inputSchema,
    // The result alone: a refusal carries no structuredContent, so the schema need not allow one.
    outputSchema: t.outputSchema,
    annotations: { title: t.title, ...t.annotations },
    _meta: { requiresHumanApproval: t.requiresHumanApproval, scope: t.scope, category: t.category },
  };
}

function readEnvelope(raw: unknown): { message: Message } | { id: RpcId; error: RpcError } {
  const invalid = (id: RpcId, why: string) => ({ id, error: new RpcError(RpcCode.INVALID_REQUEST, "Invalid Request", { reason_id: "invalid_request", detail: why }) });
  if (!isObject(raw)) return invalid(null, "the request must be a JSON object");
  const hasId = Object.hasOwn(raw, "id");
  const id = raw.id;
  const idOk = !hasId || id === null || typeof id === "string" || (typeof id === "number" && Number.isFinite(id));
  const safeId: RpcId = hasId && idOk ? (id as RpcId) : null;
  if (!idOk) return invalid(null, "id must be a string, a number or null");
  if (raw.jsonrpc !== "2.0") return invalid(safeId, 'jsonrpc must be "2.0"');
  if (typeof raw.method !== "string" || raw.method.length === 0) return invalid(safeId, "method must be a string");
  if (Object.hasOwn(raw, "params") && !isObject(raw.params) && !Array.isArray(raw.params)) return invalid(safeId, "params must be an object or an array");
  const extra = Object.keys(raw).filter((k) => !ENVELOPE_KEYS.has(k));
  if (extra.length > 0) return invalid(safeId, `unknown member ${extra[0]}`);
  return { message: { id: safeId, notification: !hasId, method: raw.method, params: raw.params } };
}

function isInitialize(raw: unknown): boolean {
  return isObject(raw) && raw.method === "initialize";
}

/** A JSON-RPC response object: an id and a result or error, and no method. */
function isResponse(raw: unknown): boolean {
  return isObject(raw) && raw.jsonrpc === "2.0" && !Object.hasOwn(raw, "method") && Object.hasOwn(raw, "id") && (Object.hasOwn(raw, "result") || Object.hasOwn(raw, "error"));
}

function nameOf(params: unknown): string | undefined {
  return isObject(params) && typeof params.name === "string" ? params.name : undefined;
}

function objectParams(params: unknown): Record<string, unknown> {
  if (params === undefined) return {};
  // Tools take named arguments only.
  if (!isObject(params)) throw invalidParams("params must be an object of named arguments");
  return params;
}

function invalidParams(detail: string) {
  return new RpcError(RpcCode.INVALID_PARAMS, "Invalid params", { reason_id: "invalid_params", detail });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function bearerOf(header: string | undefined): string | undefined {
  const m = /^Bearer +([A-Za-z0-9\-._~+/]+=*)$/i.exec(header ?? "");
  return m?.[1];
}

function errorReply(id: RpcId, e: RpcError, requestId: string): Reply {
  return { jsonrpc: "2.0", id, error: e.body(requestId) };
}

function send(reply: FastifyReply, status: number, replies: Reply[], batch = false) {
  return reply.code(status).header("cache-control", "no-store").type("application/json").send(JSON.stringify(batch ? replies : replies[0]));
}
