import type { FastifyRequest } from "fastify";
import { forRequest, withRequestId, type CoreClients } from "../core-clients.js";
import { noteRefusal } from "../request-log.js";
import { RpcCode, RpcError, rpcErrorFrom, type RpcId } from "./envelope.js";
import { compileToolSchemas, describeErrors } from "./schemas.js";
import { declaresUrlElicitation, URL_ELICITATION_SINCE, type createSessionCodec } from "./session.js";
import { MCP_CATEGORIES } from "../../lib/vocabulary.js";
import { TOOLS, type Category, type Tool } from "./tools.js";

/** MCP revisions we speak, newest first; a client asking for another one gets the newest. */
export const PROTOCOL_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"];
const ENVELOPE_KEYS = new Set(["jsonrpc", "id", "method", "params"]);
/**
 * Inside tools/call these stay JSON-RPC errors (who is calling, where, or a server failure);
 * every other refusal is a tool result with isError, so the model sees why.
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

export type Reply = { jsonrpc: "2.0"; id: RpcId; result: unknown } | { jsonrpc: "2.0"; id: RpcId; error: unknown };

/**
 * What a call runs as: the bearer as presented. The gateway never decides what a token
 * allows: each batch element hands the raw token to core, which verifies it and reads
 * its grant afresh for that element alone.
 */
export interface Caller {
  /** The HTTP request (its log line names core's refusals, noteRefusal). */
  request: FastifyRequest;
  requestId: string;
  bearer: string | undefined;
  unauthorized: boolean;
  /** A call was refused for a scope the grant lacks (HTTP 403 and a scope challenge). */
  insufficientScope?: boolean;
  /** The client said on initialize that it shows URL elicitations (its Mcp-Session-Id). */
  urlElicitation: boolean;
  /** The Mcp-Session-Id an initialize in this request negotiated. */
  issuedSession?: string;
}

export interface DispatcherOptions {
  clients: CoreClients;
  /** `{mcp_url}`: named in wrong_endpoint refusals. */
  mcpUrl: string;
  serverVersion?: string;
  sessions: ReturnType<typeof createSessionCodec>;
}

/**
 * One JSON-RPC message in, one reply (or none, for a notification) out: the envelope
 * checks, MCP's protocol methods, and tool calls validated against their schemas.
 */
export function createDispatcher(options: DispatcherOptions) {
  const { clients, sessions } = options;
  const validators = compileToolSchemas(TOOLS);
  const toolsByName = new Map(TOOLS.map((t) => [t.name, t]));
  const toolLists = new Map<Category, unknown[]>(MCP_CATEGORIES.map((c) => [c, TOOLS.filter((t) => t.category === c).map(describeTool)]));

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
      if (e.data.reason_id === "insufficient_scope") caller.insufficientScope = true;
      return msg.notification ? undefined : errorReply(msg.id, e, caller.requestId);
    }
  }

  async function dispatch(msg: Message, category: Category, caller: Caller): Promise<unknown> {
    // Which tool (if any) the message names decides whether the bearer is needed:
    // agent.grant.refresh authenticates with its own params.
    const toolName = msg.method === "tools/call" ? nameOf(msg.params) : toolsByName.has(msg.method) ? msg.method : undefined;
    const tool = toolName === undefined ? undefined : toolsByName.get(toolName);
    if (tool?.auth !== "none" && !caller.bearer) unauthorized(caller);

    switch (msg.method) {
      case "initialize":
        await authenticate(caller);
        // Sent as a notification it has no InitializeResult to ride on, so it negotiates nothing.
        return msg.notification ? undefined : initialize(msg.params, caller);
      case "ping":
        await authenticate(caller);
        objectParams(msg.params);
        return {};
      case "tools/list": {
        await authenticate(caller);
        const { cursor } = objectParams(msg.params);
        // One page and no nextCursor: no cursor can be ours (MCP pagination: an invalid one is -32602).
        if (cursor !== undefined && cursor !== null) throw invalidParams("unknown cursor: tools/list answers on one page and issues none");
        return { tools: toolLists.get(category) };
      }
      case "tools/call": {
        if (msg.params !== undefined && !isObject(msg.params)) return refuse(caller, invalidParams(NAMED_ONLY));
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
        return callTool(routeTool(msg.method, category, false, caller), msg.params, caller);
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
      return refuse(
        caller,
        new RpcError(RpcCode.METHOD_NOT_FOUND, `${name} is served at /mcp/${tool.category}`, {
          reason_id: "wrong_endpoint",
          endpoint: `${options.mcpUrl}/mcp/${tool.category}`,
        }),
        tool,
      );
    }
    return tool;
  }

  /** `routed` is awaited before anything else can throw, so a refusal is never left unhandled. */
  async function callTool(routed: Tool | Promise<never>, params: unknown, caller: Caller) {
    const tool = await routed;
    // Positional params are refused after the bearer's own check, like every refusal made here.
    if (params !== undefined && !isObject(params)) return refuse(caller, invalidParams(NAMED_ONLY), tool);
    const args = objectParams(params);
    const v = validators.get(tool.name)!;
    if (!v.input(args))
      return refuse(
        caller,
        new RpcError(RpcCode.INVALID_PARAMS, "Invalid params", { reason_id: "invalid_params", errors: describeErrors(v.input.errors) }),
        tool,
      );
    // Core verifies the token and reads the grant inside the call that acts on it.
    const result = await tool.call(args, {
      clients,
      call: tool.revokes ? withRequestId(caller.requestId, caller.request.clientAddress) : forRequest(caller.request),
      accessToken: caller.bearer ?? "",
    });
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

  return { handleOne };
}

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
    // `scopes`: every scope any one of which lets a grant call the tool; empty for any valid grant.
    _meta: { requiresHumanApproval: t.requiresHumanApproval, scope: t.scope, scopes: t.anyOf ?? (t.scope ? [t.scope] : []), category: t.category },
  };
}

function readEnvelope(raw: unknown): { message: Message } | { id: RpcId; error: RpcError } {
  const invalid = (id: RpcId, why: string) => ({
    id,
    error: new RpcError(RpcCode.INVALID_REQUEST, "Invalid Request", { reason_id: "invalid_request", detail: why }),
  });
  if (!isObject(raw)) return invalid(null, "the request must be a JSON object");
  const hasId = Object.hasOwn(raw, "id");
  const id = raw.id;
  // MCP narrows JSON-RPC: a request id is a string or an integer, never null.
  const idOk = !hasId || typeof id === "string" || Number.isSafeInteger(id);
  const safeId: RpcId = hasId && idOk ? (id as RpcId) : null;
  if (!idOk && isObject(id) && typeof id.inexact_number === "string") {
    return invalid(null, `id ${id.inexact_number} cannot be answered exactly as a JSON number: send a string, or an integer within ±(2^53-1)`);
  }
  if (!idOk) return invalid(null, "id must be a string or an integer");
  if (raw.jsonrpc !== "2.0") return invalid(safeId, 'jsonrpc must be "2.0"');
  if (typeof raw.method !== "string" || raw.method.length === 0) return invalid(safeId, "method must be a string");
  if (Object.hasOwn(raw, "params") && !isObject(raw.params) && !Array.isArray(raw.params)) return invalid(safeId, "params must be an object or an array");
  const extra = Object.keys(raw).filter((k) => !ENVELOPE_KEYS.has(k));
  if (extra.length > 0) return invalid(safeId, `unknown member ${extra[0]}`);
  return { message: { id: safeId, notification: !hasId, method: raw.method, params: raw.params } };
}

/** A JSON-RPC response object: an id and a result or error, and no method. */
function isResponse(raw: unknown): boolean {
  return (
    isObject(raw) &&
    raw.jsonrpc === "2.0" &&
    !Object.hasOwn(raw, "method") &&
    Object.hasOwn(raw, "id") &&
    (Object.hasOwn(raw, "result") || Object.hasOwn(raw, "error"))
  );
}

function nameOf(params: unknown): string | undefined {
  return isObject(params) && typeof params.name === "string" ? params.name : undefined;
}

const NAMED_ONLY = "params must be an object of named arguments";

function objectParams(params: unknown): Record<string, unknown> {
  if (params === undefined) return {};
  // Tools take named arguments only.
  if (!isObject(params)) throw invalidParams(NAMED_ONLY);
  return params;
}

function invalidParams(detail: string) {
  return new RpcError(RpcCode.INVALID_PARAMS, "Invalid params", { reason_id: "invalid_params", detail });
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function errorReply(id: RpcId, e: RpcError, requestId: string): Reply {
  return { jsonrpc: "2.0", id, error: e.body(requestId) };
}
