import { createContextKey } from "@connectrpc/connect";

/** Header that carries the gateway's request id into core on every transport. */
export const REQUEST_ID_HEADER = "x-request-id";

/** The request id of the current call (from the gateway, or minted for direct gRPC callers). */
export const kRequestId = createContextKey<string>("", { description: "request id" });
