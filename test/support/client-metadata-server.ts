import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";

export type DocumentHandler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

/**
 * A client ID metadata document server on 127.0.0.1:0 (http, or https with a test
 * certificate). Each path serves a handler; every request is counted per path, so tests
 * can tell a cached document from a fetched one, and a refusal that never connected.
 */
export async function startDocumentServer(tls?: { cert: string; key: string }, listen: { host?: string; name?: string } = {}) {
  const routes = new Map<string, DocumentHandler>();
  const hits = new Map<string, number>();
  const open = new Set<http.ServerResponse>();
  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const path = req.url ?? "/";
    hits.set(path, (hits.get(path) ?? 0) + 1);
    open.add(res);
    res.on("close", () => open.delete(res));
    const route = routes.get(path);
    if (!route) {
      res.statusCode = 404;
      res.end("not found");
      return;
    }
    route(req, res);
  };
  const server = tls ? https.createServer({ cert: tls.cert, key: tls.key }, handler) : http.createServer(handler);
  // `host` is the address to bind, `name` what the URLs say (e.g. bind ::1, name localhost).
  await new Promise<void>((resolve) => server.listen(0, listen.host ?? "127.0.0.1", resolve));
  const origin = `${tls ? "https" : "http"}://${listen.name ?? "127.0.0.1"}:${(server.address() as AddressInfo).port}`;
  let n = 0;

  const api = {
    origin,
    /** Hits of a path (or of a full URL on this server). */
    hits: (pathOrUrl: string) => hits.get(pathOrUrl.startsWith(origin) ? pathOrUrl.slice(origin.length) : pathOrUrl) ?? 0,
    totalHits: () => [...hits.values()].reduce((a, b) => a + b, 0),
    /** A fresh path (so tests sharing the server never share a cache entry). */
    path: (name = "client") => `/clients/${name}-${++n}.json`,
    route(path: string, h: DocumentHandler): string {
      routes.set(path, h);
      return origin + path;
    },
    /** Serves `body` (JSON-encoded unless a string or bytes) with the given headers. */
    serve(path: string, body: unknown, headers: Record<string, string> = {}, status = 200): string {
      return api.route(path, (_req, res) => {
        res.writeHead(status, { "content-type": "application/json", ...headers });
        res.end(typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body));
      });
    },
    /** A valid public-client document at a fresh path, with `overrides` applied; returns its URL (the client_id). */
    document(overrides: Record<string, unknown> = {}, headers: Record<string, string> = {}, name?: string): string {
      const path = api.path(name);
      const url = origin + path;
      return api.serve(path, validDocument(url, overrides), headers);
    },
    async close() {
      for (const res of open) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return api;
}
export type DocumentServer = Awaited<ReturnType<typeof startDocumentServer>>;

export const DOCUMENT_REDIRECT = "http://127.0.0.1:9/callback";

export function validDocument(clientId: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    client_id: clientId,
    client_name: "Document agent",
    client_uri: "https://agent.example",
    redirect_uris: [DOCUMENT_REDIRECT],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "none",
    ...overrides,
  };
}
