import { hkdfSync } from "node:crypto";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import type { Logger } from "pino";
import { ErrorDetailSchema, Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { AuditService } from "../gen/vaultgate/audit/v1/audit_pb.js";
import { GrantsService } from "../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService } from "../gen/vaultgate/partners/v1/partners_pb.js";
import { BudgetsService } from "../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PartnerResourcesService } from "../gen/vaultgate/partners/v1/resources_pb.js";
import { TreasuryService } from "../gen/vaultgate/treasury/v1/treasury_pb.js";
import { departureSignal } from "./shared/client-departure.js";

export interface CoreClients {
  health: Client<typeof Health>;
  partners: Client<typeof PartnersService>;
  audit: Client<typeof AuditService>;
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  partnerResources: Client<typeof PartnerResourcesService>;
  treasury: Client<typeof TreasuryService>;
  /**
   * The key that signs stateless MCP session ids (gateways/jsonrpc): HKDF-SHA256 of
   * GATEWAY_TOKEN, so every replica shares it and it reveals nothing of the token. Unset
   * without a GATEWAY_TOKEN (the JSON-RPC gateway then uses a per-process key).
   */
  mcpSessionKey?: Uint8Array;
}

export interface CoreClientsOptions {
  /** GATEWAY_TOKEN: the credential that lets this gateway vouch for client addresses. */
  gatewayToken?: string;
}

/** Typed clients over one transport: in-memory router transport or gRPC h2c. */
export function createCoreClients(base: Transport, options: CoreClientsOptions = {}): CoreClients {
  const { gatewayToken } = options;
  const transport = whileClientWaits(gatewayToken ? withGatewayCredential(base, gatewayToken) : base);
  return {
    mcpSessionKey: gatewayToken ? new Uint8Array(hkdfSync("sha256", gatewayToken, "", "vaultgate mcp-session-id v1", 32)) : undefined,
    health: createClient(Health, transport),
    partners: createClient(PartnersService, transport),
    audit: createClient(AuditService, transport),
    grants: createClient(GrantsService, transport),
    budgets: createClient(BudgetsService, transport),
    partnerResources: createClient(PartnerResourcesService, transport),
    treasury: createClient(TreasuryService, transport),
  };
}

/**
 * Presents the gateway credential on every call, so core believes the request id it
 * carries (a core across the network mints its own for calls without it).
 */
type Header = ConstructorParameters<typeof Headers>[0];

function withGatewayCredential(transport: Transport, gatewayToken: string): Transport {
  const sign = (header: Header): Header => {
    if (header === undefined) return { "x-vaultgate-gateway": gatewayToken };
    // withRequestId's plain object, copied cheaply; anything else through Headers.
    if (!(header instanceof Headers) && !Array.isArray(header)) return { ...header, "x-vaultgate-gateway": gatewayToken };
    const h = new Headers(header);
    h.set("x-vaultgate-gateway", gatewayToken);
    return h;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) => transport.unary(method, signal, timeoutMs, sign(header), input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) => transport.stream(method, signal, timeoutMs, sign(header), input, contextValues),
  };
}

/**
 * Call options that carry the edge request id and the client's address into core (only headers
 * cross both transports); core believes them only from a caller holding the gateway credential.
 * The call runs even if the client has left: for records of what the edge already refused.
 */
export function withRequestId(requestId: string, clientAddress?: string): { headers: Record<string, string>; signal?: AbortSignal } {
  if (!clientAddress) return { headers: { "x-request-id": requestId } };
  return { headers: { "x-request-id": requestId, "x-vaultgate-client-address": clientAddress } };
}

/**
 * withRequestId for a call made to answer `request`, with a signal aborted when its client leaves
 * before the answer: core then drops the call if it is still queued, and writes nothing for it
 * (a call that has begun its transaction finishes).
 */
export function forRequest(request: FastifyRequest): ReturnType<typeof withRequestId> {
  const options = withRequestId(request.id, request.clientAddress);
  const signal = departureSignal(request);
  return signal ? { ...options, signal } : options;
}

/**
 * A call aborted because its client left fails as a retryable outage (UNAVAILABLE), which every
 * surface answers without logging an error: the answer reaches nobody, and nothing failed.
 */
function whileClientWaits(transport: Transport): Transport {
  const left = (signal: AbortSignal | undefined, err: unknown) =>
    signal?.aborted && err instanceof ConnectError && err.code === Code.Canceled && err.findDetails(ErrorDetailSchema).length === 0
      ? unavailable("the client closed the connection before its answer", 0)
      : err;
  return {
    unary: (method, signal, ...rest) =>
      transport.unary(method, signal, ...rest).catch((err: unknown) => {
        throw left(signal, err);
      }),
    stream: (method, signal, ...rest) =>
      transport.stream(method, signal, ...rest).catch((err: unknown) => {
        throw left(signal, err);
      }),
  };
}

/** How long a client should wait before retrying while core cannot be reached. */
const CORE_RETRY_AFTER_SECONDS = 5;

/**
 * For a gateway dialling core over the network: a call that never reached core (refused, reset,
 * core restarting) becomes the same retryable outage a database outage is, so every surface
 * answers its own 503 instead of a 500, and this process logs one warning per call.
 */
export function coreUnreachable(logger: Logger): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      if (!(err instanceof ConnectError) || err.code !== Code.Unavailable || err.findDetails(ErrorDetailSchema).length > 0) throw err;
      logger.warn({ requestId: req.header.get("x-request-id"), rpc: `${req.service.typeName}/${req.method.name}`, cause: err.rawMessage }, "core unreachable");
      throw unavailable("core is unreachable; retry later", CORE_RETRY_AFTER_SECONDS);
    }
  };
}

/** A retryable outage the gateway met itself: every surface renders it as its own 503 with Retry-After. */
export function unavailable(message: string, retryAfterSeconds: number): ConnectError {
  return new ConnectError(message, Code.Unavailable, undefined, [{ desc: ErrorDetailSchema, value: { reason: Reason.UNAVAILABLE, retryAfterSeconds } }]);
}
