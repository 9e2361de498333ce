import { createContextKey } from "@connectrpc/connect";
import type { Logger } from "pino";

/** Header that carries the gateway's request id into core on every transport. */
export const REQUEST_ID_HEADER = "x-request-id";

/** The request id of the current call (from the gateway, or minted for direct gRPC callers). */
export const kRequestId = createContextKey<string>("", { description: "request id" });

/** A pino child logger bound to the request id. */
export const kLogger = createContextKey<Logger | undefined>(undefined, { description: "request logger" });
