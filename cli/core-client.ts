import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Interceptor } from "@connectrpc/connect";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { readAdminToken } from "./admin-token.js";
import { loadCoreDial, type Config } from "./config.js";

/**
 * Admin clients for the operator CLI: gRPC to the running core, over TLS for an https://
 * CORE_URL (trusting CORE_TLS_CA, presenting CORE_TLS_CLIENT_CERT when set).
 */
export async function connectAdmin(config: Config): Promise<{ clients: CoreClients; coreUrl: string }> {
  const coreUrl = config.coreUrl ?? defaultCoreUrl(config);
  const dial = loadCoreDial(config, coreUrl);
  const token = await readAdminToken(config.dataDir, config.adminToken);
  if (!token) {
    throw new Error(`no operator credential: set ADMIN_TOKEN or start the service once so it writes ${config.dataDir}/admin-token`);
  }
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const transport = createGrpcTransport({ baseUrl: dial.baseUrl, nodeOptions: dial.nodeOptions, interceptors: [auth] });
  return { clients: createCoreClients(transport), coreUrl };
}

/** The core of this host: CORE_HOST (loopback for a wildcard bind) and CORE_PORT, https when it serves TLS. */
function defaultCoreUrl(config: Config): string {
  const host = config.coreHost === "0.0.0.0" || config.coreHost === "::" ? "127.0.0.1" : config.coreHost;
  const scheme = config.coreTls.certFile ? "https" : "http";
  return `${scheme}://${host.includes(":") ? `[${host}]` : host}:${config.corePort}`;
}
