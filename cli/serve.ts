import { createGrpcTransport } from "@connectrpc/connect-node";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { createCore, type Core } from "../core/core.js";
import { startCoreServer, type CoreServer } from "../core/server.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { buildGateway } from "../gateways/app.js";
import { createCoreClients } from "../gateways/core-clients.js";
import { ensureAdminToken } from "./admin-token.js";
import type { Config } from "./config.js";

export type Role = "all" | "core" | "gateway";

export interface Running {
  gatewayUrl?: string;
  coreUrl?: string;
  close(): Promise<void>;
}

/** Starts the roles of DESIGN 2 in this process. */
export async function serve(config: Config, role: Role, logger: Logger): Promise<Running> {
  let core: Core | undefined;
  let coreServer: CoreServer | undefined;
  let gateway: FastifyInstance | undefined;
  const close = async () => {
    await gateway?.close();
    await coreServer?.close();
    await core?.close();
  };
  try {
    if (role !== "gateway") {
      const adminToken = await ensureAdminToken(config.dataDir, config.adminToken);
      core = await createCore({
        db: config.databaseUrl ? { url: config.databaseUrl, poolMax: config.databasePoolMax } : { dataDir: `${config.dataDir}/pgdata` },
        logger,
        adminToken,
        signingKey: config.signingKey,
        dataDir: config.dataDir,
        issuer: config.issuer,
        partnerAudience: config.partnerAudience,
        tokenIssuanceLimitPerMinute: config.tokenIssuanceLimitPerMinute,
        tokenFailuresPerAddressPerMinute: config.tokenFailuresPerAddressPerMinute,
        registrationLimitPerMinute: config.registrationLimitPerMinute,
        appUrl: config.appUrl,
        provisioningLimitPerMinute: config.provisioningLimitPerMinute,
        reaperIntervalMs: 60_000,
        resourceRateLimits: { default: config.partnerResourceLimitPerMinute },
        kycSandboxUrl: config.kycSandboxUrl,
        webhookPollMs: config.webhookPollMs,
        mcpUrl: config.mcpUrl,
        urnNamespace: config.urnNamespace,
        refreshGraceSeconds: config.refreshGraceSeconds,
      });
      coreServer = await startCoreServer(core, config.corePort, config.host);
      logger.info({ url: coreServer.url }, "core listening (gRPC, gRPC-Web, Connect over h2c)");
    }
    if (role !== "core") {
      if (role === "gateway" && !config.coreUrl) throw new Error("--role gateway needs CORE_URL (where core listens)");
      const transport = core
        ? createInProcessTransport(core.routes, core.interceptors)
        : createGrpcTransport({ baseUrl: config.coreUrl! });
      gateway = await buildGateway({
        clients: createCoreClients(transport),
        logger,
        urls: { issuer: config.issuer, baseUrl: config.baseUrl, authUrl: config.authUrl, appUrl: config.appUrl, mcpUrl: config.mcpUrl },
      });
      await gateway.listen({ port: config.port, host: config.host });
    }
  } catch (err) {
    await close().catch(() => {});
    throw err;
  }
  const gatewayUrl = gateway ? `http://${hostForUrl(config.host)}:${(gateway.server.address() as { port: number }).port}` : undefined;
  return { gatewayUrl, coreUrl: coreServer?.url, close };
}

function hostForUrl(host: string) {
  return host.includes(":") ? `[${host}]` : host;
}
