import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Core } from "./core.js";

/** The largest request message core reads, whoever sends it: the largest valid one, 1,000 payouts with every field at its longest, is about 1 MiB. */
export const CORE_READ_MAX_BYTES = 4 * 1024 * 1024;

export interface CoreServer {
  url: string;
  close(): Promise<void>;
}

export interface CoreServerOptions {
  /** PEM key material for TLS; with `ca`, clients must present a certificate from it (mTLS). */
  tls?: { cert: string; key: string; ca?: string };
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
  const handler = connectNodeAdapter({ routes: core.routes, interceptors: core.interceptors, readMaxBytes: CORE_READ_MAX_BYTES });
  const { tls } = options;
  const server = tls
    ? http2.createSecureServer(
        {
          cert: tls.cert,
          key: tls.key,
          ...(tls.ca ? { ca: tls.ca, requestCert: true, rejectUnauthorized: true } : {}),
          minVersion: "TLSv1.2",
          // HTTP/2 only, as in cleartext: every core client (grpc-js, connect-node) negotiates h2.
          allowHTTP1: false,
        },
        handler,
      )
    : http2.createServer(handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
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
        for (const s of sessions) s.close();
        server.close(() => resolve());
      }),
  };
}
