import { createContextKey, type ContextValues } from "@connectrpc/connect";

/** Header that carries the gateway's request id into core on every transport. */
export const REQUEST_ID_HEADER = "x-request-id";
/** Header of the gateway credential: proves the caller is one of our gateways. */
export const GATEWAY_CREDENTIAL_HEADER = "x-vaultgate-gateway";
/** Header of the client address a gateway saw; believed only with a valid gateway credential. */
export const CLIENT_ADDRESS_HEADER = "x-vaultgate-client-address";

/** The current call's request id: one an authenticated gateway sent, else core's own; never a caller's. */
export const kRequestId = createContextKey<string>("", { description: "request id" });

/** True when the call presented a valid gateway credential (GATEWAY_TOKEN). */
export const kGatewayCaller = createContextKey<boolean>(false, { description: "gateway credential presented" });

/** True when the call presented the operator credential (ADMIN_TOKEN) as its bearer. */
export const kOperator = createContextKey<boolean>(false, { description: "operator credential presented" });

/**
 * Client address vouched for by a gateway holding the gateway credential; "" when nobody vouched,
 * so direct callers share one bucket in every per-address limit.
 */
export const kClientAddress = createContextKey<string>("", { description: "client address vouched for by a gateway" });

/** The network of kClientAddress that per-address limits and fair shares count (an IPv6 address's /64). */
export const kClientNetwork = createContextKey<string>("", { description: "network of the vouched client address" });

/**
 * True for calls from a gateway in this process: that gateway logs the request and core's refusal
 * reason, so core does not log the refusal twice.
 */
export const kInProcess = createContextKey<boolean>(false, { description: "call from a gateway in this process" });

/** What every audit record of a call carries: its request id and the client address a gateway vouched for. */
export function callFacts(ctx: { values: ContextValues }): { requestId: string; clientAddress: string } {
  return { requestId: ctx.values.get(kRequestId), clientAddress: ctx.values.get(kClientAddress) };
}
