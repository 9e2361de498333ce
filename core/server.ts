import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Core } from "./core.js";

export interface CoreServer {
  url: string;
  close(): Promise<void>;
}

/** Serves every core service over HTTP/2 cleartext: gRPC, gRPC-Web and Connect. */
export async function startCoreServer(core: Pick<Core, "routes" | "interceptors">, port: number, host = "127.0.0.1"): Promise<CoreServer> {
  const handler = connectNodeAdapter({ routes: core.routes, interceptors: core.interceptors });
  const server = http2.createServer(handler);
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
    url: `http://${shownHost}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sessions) s.close();
        server.close(() => resolve());
      }),
  };
}
