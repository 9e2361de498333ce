import http from "node:http";
import https from "node:https";
import { isIP } from "node:net";
import { pinnedLookup, type ResolvedAddress } from "./resolver.js";

/** The host a URL names, without the brackets of an IPv6 literal. */
export function urlHost(url: URL): string {
  return url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
}

export interface PinnedRequestOptions {
  method: "GET" | "POST";
  headers: http.OutgoingHttpHeaders;
  signal?: AbortSignal;
  /** The CA https servers must chain to (default: Node's roots). */
  ca?: string;
}

/**
 * A request to `url` whose connection goes to `address` only: the caller resolved and
 * checked it, so no second lookup can lead elsewhere. Host and SNI still name the URL's
 * host; no pooled agent, and a redirect is an answer like any other (never followed).
 */
export function pinnedRequest(url: URL, address: ResolvedAddress, options: PinnedRequestOptions): http.ClientRequest {
  const host = urlHost(url);
  const secure = url.protocol === "https:";
  return (secure ? https : http).request({
    protocol: url.protocol,
    hostname: host,
    port: url.port || undefined,
    path: url.pathname + url.search,
    method: options.method,
    agent: false,
    lookup: pinnedLookup(address),
    headers: options.headers,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(secure && !isIP(host) ? { servername: host } : {}),
    ...(secure && options.ca ? { ca: options.ca } : {}),
  });
}
