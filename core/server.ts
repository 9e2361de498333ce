import { setMaxListeners } from "node:events";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, createConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ErrorDetailSchema, Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import type { Core } from "./core.js";
import { refuseUnreadableRequests } from "./unreadable-requests.js";

/** The largest request message core reads, whoever sends it: the largest valid one, 1,000 payouts with every field at its longest, is about 1 MiB. */
export const CORE_READ_MAX_BYTES = 4 * 1024 * 1024;
/** Streams one caller's connection may have open at once; a client queues any more. */
export const CORE_MAX_CONCURRENT_STREAMS = 256;
/** How long a connection may stay without an open stream before core closes it (GOAWAY); gateways close theirs sooner. */
export const CORE_IDLE_SESSION_MS = 5 * 60_000;

/** What a stream cut by shutdown ends with: retryable, so a tail resumes from its last watermark elsewhere. */
const SHUTTING_DOWN = new ConnectError("core is shutting down; resume from the last watermark", Code.Unavailable, undefined, [
  { desc: ErrorDetailSchema, value: { reason: Reason.UNAVAILABLE, retryAfterSeconds: 1 } },
]);

export interface CoreServer {
  url: string;
  close(): Promise<void>;
}

export interface CoreServerOptions {
  /** PEM key material for TLS; with `ca`, clients must present a certificate from it (mTLS). */
  tls?: { cert: string; key: string; ca?: string };
  /** Longest time a request message may take to arrive before its stream is cancelled; default 30 s. */
  requestTimeoutMs?: number;
  /** How long a connection may have no open stream before it is closed; default CORE_IDLE_SESSION_MS. */
  idleSessionMs?: number;
}

/**
 * Serves every core service over HTTP/2: gRPC, gRPC-Web and Connect, over TLS when given
 * key material, else cleartext h2c (the caller decides where that is allowed: cli/config.ts).
 */
export async function startCoreServer(
  core: Pick<Core, "routes" | "interceptors">,
  port: number,
  host = "127.0.0.1",
  options: CoreServerOptions = {},
): Promise<CoreServer> {
  // Aborted on close: a stream that never ends by itself (an audit tail) would hold the drain open.
  const shutdown = new AbortController();
  // Every call in flight listens to it (its signal is linked), so the count is the calls open, not a leak.
  setMaxListeners(0, shutdown.signal);
  const adapter = connectNodeAdapter({
    routes: (router) => {
      core.routes(router);
      refuseUnreadableRequests(router);
    },
    interceptors: core.interceptors,
    readMaxBytes: CORE_READ_MAX_BYTES,
    shutdownSignal: shutdown.signal,
  });
  const handler = cancelStalledRequests(core, adapter, options.requestTimeoutMs ?? 30_000);
  const { tls } = options;
  const settings = { maxConcurrentStreams: CORE_MAX_CONCURRENT_STREAMS };
  const server = tls
    ? http2.createSecureServer(
        {
          cert: tls.cert,
          key: tls.key,
          ...(tls.ca ? { ca: tls.ca, requestCert: true, rejectUnauthorized: true } : {}),
          minVersion: "TLSv1.2",
          // HTTP/2 only, as in cleartext: every core client (grpc-js, connect-node) negotiates h2.
          allowHTTP1: false,
          settings,
        },
        handler,
      )
    : http2.createServer({ settings }, handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  const idleMs = options.idleSessionMs ?? CORE_IDLE_SESSION_MS;
  server.on("session", (s) => {
    sessions.add(s);
    // Idle means no open stream (as gRPC's max connection idle), so a long quiet stream is never cut.
    let open = 0;
    let idle: NodeJS.Timeout | undefined;
    const arm = () => {
      idle = setTimeout(() => s.close(), idleMs).unref();
    };
    arm();
    s.on("stream", (stream) => {
      if (open++ === 0) clearTimeout(idle);
      stream.once("close", () => {
        if (--open === 0 && !s.closed && !s.destroyed) arm();
      });
    });
    s.once("close", () => {
      clearTimeout(idle);
      sessions.delete(s);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `${tls ? "https" : "http"}://${shownHost}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        shutdown.abort(SHUTTING_DOWN);
        for (const s of sessions) s.close();
        server.close(() => resolve());
      }),
  };
}

type Handler = (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void;

/**
 * Connect buffers a request message (up to CORE_READ_MAX_BYTES) until it is whole, before any
 * credential is read, so a caller that stops mid-message would hold that memory for ever. A stream
 * of requests (reflection) may stay open, but not silent: it is cancelled after `ms` without traffic.
 */
function cancelStalledRequests(core: Pick<Core, "routes">, next: Handler, ms: number): Handler {
  const router = createConnectRouter();
  core.routes(router);
  const streamed = new Set(
    router.handlers.filter((h) => h.method.methodKind === "client_streaming" || h.method.methodKind === "bidi_streaming").map((h) => h.requestPath),
  );
  return (req, res) => {
    const stream = req.stream;
    if (streamed.has(req.url.split("?", 1)[0]!)) {
      stream.setTimeout(ms, () => stream.close(http2.constants.NGHTTP2_CANCEL));
    } else if (!stream.endAfterHeaders) {
      const timer = setTimeout(() => {
        if (!req.readableEnded && !stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      }, ms);
      stream.once("close", () => clearTimeout(timer));
    }
    next(req, res);
  };
}
