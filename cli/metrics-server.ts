import http from "node:http";
import type { AddressInfo } from "node:net";
import { collectDefaultMetrics, Registry } from "prom-client";
import { constantTimeEqual } from "../lib/crypto.js";

/** Node's process metrics (CPU, memory, event loop lag, GC, handles), collected once per process. */
const processRegistry = new Registry();
collectDefaultMetrics({ register: processRegistry });

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` on its own listener, never the public gateway port; with `token` a
 * scrape must present it as a bearer (compared in constant time).
 */
export async function startMetricsServer(options: { host: string; port: number; token?: string; registries: Registry[] }): Promise<MetricsServer> {
  const registry = Registry.merge([processRegistry, ...options.registries]);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?", 1)[0];
    if (path !== "/metrics") return void res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    if (req.method !== "GET" && req.method !== "HEAD")
      return void res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain" }).end("method not allowed\n");
    if (options.token) {
      const header = req.headers.authorization ?? "";
      const presented = header.startsWith("Bearer ") ? header.slice(7) : "";
      if (!presented || !constantTimeEqual(presented, options.token)) {
        return void res.writeHead(401, { "www-authenticate": 'Bearer realm="vaultgate-metrics"', "content-type": "text/plain" }).end("unauthorized\n");
      }
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" }).end(req.method === "HEAD" ? undefined : text),
      () => res.writeHead(500, { "content-type": "text/plain" }).end("metrics unavailable\n"),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  return {
    url: `http://${shownHost}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
