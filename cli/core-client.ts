import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Interceptor } from "@connectrpc/connect";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { readAdminToken } from "./admin-token.js";
import type { Config } from "./config.js";

/** Admin clients for the operator CLI: gRPC over h2c to the running core. */
export async function connectAdmin(config: Config): Promise<{ clients: CoreClients; coreUrl: string }> {
  const coreUrl = config.coreUrl ?? `http://127.0.0.1:${config.corePort}`;
  const token = await readAdminToken(config.dataDir, config.adminToken);
  if (!token) {
    throw new Error(`no operator credential: set ADMIN_TOKEN or start the service once so it writes ${config.dataDir}/admin-token`);
  }
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({ baseUrl: coreUrl, interceptors: [auth] });
  return { clients: createCoreClients(transport), coreUrl };
}
