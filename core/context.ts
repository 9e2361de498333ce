import { createContextKey } from "@connectrpc/connect";

/** Header that carries the gateway's request id into core on every transport. */
export const REQUEST_ID_HEADER = "x-request-id";
/** Header of the gateway credential: proves the caller is one of our gateways. */
export const GATEWAY_CREDENTIAL_HEADER = "x-vaultgate-gateway";
/** Header of the client address a gateway saw; believed only with a valid gateway credential. */
export const CLIENT_ADDRESS_HEADER = "x-vaultgate-client-address";

/**
 * The request id of the current call: the one an authenticated gateway sent (the gateway
 * credential, or a gateway in this process), else one core makes; never a caller's own.
 */
export const kRequestId = createContextKey<string>("", { description: "request id" });

/** True when the call presented a valid gateway credential (GATEWAY_TOKEN). */
export const kGatewayCaller = createContextKey<boolean>(false, { description: "gateway credential presented" });

/** True when the call presented the operator credential (ADMIN_TOKEN) as its bearer. */
export const kOperator = createContextKey<boolean>(false, { description: "operator credential presented" });

/**
 * The network address of the client behind the call, as vouched for by a gateway that
 * proved itself with the gateway credential; "" when nobody vouched (direct callers share
 * one bucket in every per-address limit).
 */
export const kClientAddress = createContextKey<string>("", { description: "client address vouched for by a gateway" });

/**
 * True when the call came through the in-process transport, from a gateway in this
 * process: that gateway writes the request's one log line, naming core's refusal reason,
 * so core does not log the refusal again.
 */
export const kInProcess = createContextKey<boolean>(false, { description: "call from a gateway in this process" });
