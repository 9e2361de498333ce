import { randomBytes } from "node:crypto";
import { createRouterTransport, type Interceptor } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { createCore, type Core } from "../../core/core.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients, type CoreClients } from "../../gateways/core-clients.js";
import { createCapturedLogger } from "./logs.js";
import { TEST_AUDIENCE, TEST_ISSUER } from "./stack.js";

/* Replicas: several cores (each with its own gateway and connection pool) on one database. */

export interface Replica {
  core: Core;
  clients: CoreClients;
  admin: CoreClients;
  adminToken: string;
  url: string;
  gateway: FastifyInstance;
  close(): Promise<void>;
}

/**
 * One replica of `vaultgate serve` on the PostgreSQL database at `dbUrl`: its own core,
 * signing key, connection pool and HTTP gateway on 127.0.0.1:0, and the wall clock, so
 * rows written by different replicas can be ordered in time.
 */
export async function startReplica(dbUrl: string, options: { adminToken: string; gatewayToken?: string; poolMax?: number }): Promise<Replica> {
  const logs = createCapturedLogger();
  const gatewayToken = options.gatewayToken ?? randomBytes(16).toString("hex");
  const core = await createCore({
    db: { url: dbUrl, poolMax: options.poolMax ?? 10 },
    logger: logs.logger,
    adminToken: options.adminToken,
    gatewayToken,
    issuer: TEST_ISSUER,
    partnerAudience: TEST_AUDIENCE,
    clock: () => new Date(),
    migrate: false,
    registrationLimitPerMinute: 1_000_000,
  });
  const transport = createInProcessTransport(core.routes, core.interceptors);
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${options.adminToken}`);
    return next(req);
  };
  const adminTransport = createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } });
  const gateway = await buildGateway({
    clients: createCoreClients(transport, { gatewayToken }),
    logger: logs.logger,
    urls: { issuer: TEST_ISSUER, baseUrl: TEST_ISSUER, authUrl: TEST_ISSUER, appUrl: TEST_ISSUER, mcpUrl: TEST_ISSUER },
  });
  await gateway.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  return {
    core,
    clients: createCoreClients(transport),
    admin: createCoreClients(adminTransport),
    adminToken: options.adminToken,
    url,
    gateway,
    async close() {
      await gateway.close();
      await core.close();
    },
  };
}

/** POSTs a JSON-RPC body (one message or a batch) with an agent bearer; the caller names the replies' shape it reads. */
export async function postJsonRpc(url: string, body: unknown, bearer?: string) {
  const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  const res = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text ? (JSON.parse(text) as unknown) : undefined };
}
