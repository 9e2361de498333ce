import { createGrpcTransport } from "@connectrpc/connect-node";
import type { SecureClientSessionOptions } from "node:http2";
import type { Transport } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { createCore, type Core } from "../core/core.js";
import { loadHotWallets } from "../core/settlement/settlement.js";
import { CORE_IDLE_SESSION_MS, startCoreServer, type CoreServer } from "../core/server.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { buildGateway } from "../gateways/app.js";
import { coreUnreachable, createCoreClients } from "../gateways/core-clients.js";
import { ensureAdminToken, ensureGatewayToken, readGatewayToken } from "./admin-token.js";
import { secureDataDir } from "./data-dir.js";
import { ConfigError, type Config } from "./config.js";
import { loadCoreDial, loadCoreServerTls } from "./core-tls.js";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import type { Registry } from "prom-client";
import { coreRegistry } from "../core/observability/metrics.js";
import { gatewayRegistry, tracedTransport } from "../gateways/shared/observability.js";
import { startMetricsServer, type MetricsServer } from "./metrics-server.js";
import { startTracing, type Tracing } from "./tracing.js";
import type { Db } from "../core/db/knex.js";
import { applyMigrations, migrationLines, openDatabase } from "./migrate.js";

export type Role = "all" | "core" | "gateway";

export interface Running {
  gatewayUrl?: string;
  coreUrl?: string;
  /** METRICS_PORT set: where this process's metrics are scraped. */
  metricsUrl?: string;
  close(): Promise<void>;
}

/**
 * Starts the given roles (core, gateway or both) in this process. Every setting the roles need (TLS files,
 * CORE_URL, GATEWAY_TOKEN) is checked before anything starts.
 */
export async function serve(config: Config, role: Role, logger: Logger): Promise<Running> {
  // Checked here, not in loadConfig: the CLI only presents it, and core's answer says if it is wrong.
  if (role !== "gateway" && config.adminToken !== undefined && !/^[\x21-\x7e]{16,512}$/.test(config.adminToken))
    throw new ConfigError("ADMIN_TOKEN must be 16 to 512 printable ASCII characters without spaces (e.g. `openssl rand -base64 32`)");
  const coreTls = role !== "gateway" ? loadCoreServerTls(config) : undefined;
  await secureDataDir(config.dataDir, logger);
  let dial: ReturnType<typeof loadCoreDial> | undefined;
  let gatewayToken: string | undefined;
  if (role === "gateway") {
    if (!config.coreUrl) throw new ConfigError("--role gateway needs CORE_URL (where core listens)");
    dial = loadCoreDial(config, config.coreUrl);
    // Never generated here: a token core does not know would vouch for nothing.
    gatewayToken = await readGatewayToken(config.dataDir, config.gatewayToken);
    if (!gatewayToken) {
      throw new ConfigError(
        `--role gateway needs GATEWAY_TOKEN: set the same value on core and every gateway (core writes one into ${config.dataDir}/gateway-token when unset)`,
      );
    }
  } else {
    gatewayToken = await ensureGatewayToken(config.dataDir, config.gatewayToken);
  }
  let db: Db | undefined;
  let core: Core | undefined;
  let coreServer: CoreServer | undefined;
  let gateway: FastifyInstance | undefined;
  let metrics: MetricsServer | undefined;
  let tracer: Tracing | undefined;
  const close = async () => {
    await metrics?.close();
    if (gateway) {
      const closing = gateway.close();
      // A connection whose last response went out during the drain idles on keep-alive and would hold the
      // server open past the grace period; the close only reaps connections idle when it starts.
      const reap = setInterval(() => gateway!.server.closeIdleConnections(), 100);
      await closing.finally(() => clearInterval(reap));
    }
    await coreServer?.close();
    await core?.close();
    await db?.destroy();
    await tracer?.shutdown();
  };
  const tracing = config.tracing.exporter === "otlp";
  try {
    if (tracing) tracer = startTracing({ exporter: new OTLPTraceExporter({ url: config.tracing.endpoint }), serviceName: config.tracing.serviceName });
    if (role !== "gateway") {
      const adminToken = await ensureAdminToken(config.dataDir, config.adminToken);
      // A hot wallet's bad key file refuses the start before the database is opened or migrated.
      const hotWallets = await loadHotWallets(config.settlement, config.dataDir);
      // Migrated here, not by core: a failed migration is one line in our words, as with `vaultgate migrate`.
      const lines = migrationLines((line) => logger.warn(line));
      db = await openDatabase(config, lines, config.databasePoolMax);
      await applyMigrations(db, lines, config.databaseUrl);
      core = await createCore({
        db: { instance: db },
        migrate: false,
        hotWallets,
        logger,
        adminToken,
        gatewayToken,
        signingKey: config.signingKey,
        webhookSecretKey: config.webhookSecretKey,
        signinCodeKey: config.signinCodeKey,
        smtp: config.smtp,
        oidc: config.oidc,
        signinMethods: config.signinMethods,
        dataDir: config.dataDir,
        issuer: config.issuer,
        partnerAudience: config.partnerAudience,
        tokenIssuanceLimitPerMinute: config.tokenIssuanceLimitPerMinute,
        registrationLimitPerMinute: config.registrationLimitPerMinute,
        signinFlowStartsPerMinute: config.signinFlowStartsPerMinute,
        appUrl: config.appUrl,
        authUrl: config.authUrl,
        provisioningLimitPerMinute: config.provisioningLimitPerMinute,
        reaperIntervalMs: 60_000,
        pruneIntervalMs: 300_000,
        resourceRateLimits: { default: config.partnerResourceLimitPerMinute },
        kycSandboxUrl: config.kycSandboxUrl,
        webhookPollMs: config.webhookPollMs,
        mcpUrl: config.mcpUrl,
        urnNamespace: config.urnNamespace,
        refreshGraceSeconds: config.refreshGraceSeconds,
        clientMetadataAllowPrivate: config.clientMetadataAllowPrivate,
        webhookAllowPrivate: config.webhookAllowPrivate,
        tracing,
        settlement: config.settlement,
      });
      if (!config.databaseUrl) await secureDataDir(config.dataDir, logger, "database opened");
      coreServer = await startCoreServer(core, config.corePort, config.coreHost, { tls: coreTls }).catch(
        bindError("CORE_PORT", "CORE_HOST", config.coreHost, config.corePort),
      );
      const over = !coreTls ? "h2c" : coreTls.ca ? "TLS, client certificates required" : "TLS";
      logger.info({ url: coreServer.url, tls: !!coreTls, clientCertificates: !!coreTls?.ca }, `core listening (gRPC, gRPC-Web, Connect over ${over})`);
    }
    if (role !== "core") {
      const direct = core ? createInProcessTransport(core.routes, core.interceptors) : coreTransport(dial!, logger);
      const transport = tracing ? tracedTransport(direct) : direct;
      gateway = await buildGateway({
        clients: createCoreClients(transport, { gatewayToken }),
        logger,
        urls: { issuer: config.issuer, baseUrl: config.baseUrl, authUrl: config.authUrl, appUrl: config.appUrl, mcpUrl: config.mcpUrl },
        allowedOrigins: config.allowedOrigins,
        trustProxy: config.trustProxy,
        tracing,
        signinMethods: config.signinMethods,
      });
      await gateway.listen({ port: config.port, host: config.host }).catch(bindError("PORT", "HOST", config.host, config.port));
    }
    if (config.metricsPort !== undefined) {
      const registries: Registry[] = [...(core ? [coreRegistry] : []), ...(gateway ? [gatewayRegistry] : [])];
      metrics = await startMetricsServer({ host: config.metricsHost, port: config.metricsPort, token: config.metricsToken, registries }).catch(
        bindError("METRICS_PORT", "METRICS_HOST", config.metricsHost, config.metricsPort),
      );
      logger.info({ url: metrics.url, authenticated: !!config.metricsToken }, "metrics listening");
    }
  } catch (err) {
    await close().catch(() => {});
    throw err;
  }
  const gatewayUrl = gateway ? `http://${hostForUrl(config.host)}:${(gateway.server.address() as { port: number }).port}` : undefined;
  return { gatewayUrl, coreUrl: coreServer?.url, metricsUrl: metrics?.url, close };
}

const BIND_PROBLEMS: Record<string, string> = {
  EADDRINUSE: "is already in use by another process",
  EACCES: "needs privileges this process does not have",
  EADDRNOTAVAIL: "is not an address of this machine",
  ENOTFOUND: "is not a host name this machine can resolve",
};

/** A listener that cannot bind names the settings to change, not only the errno. */
function bindError(portSetting: string, hostSetting: string, host: string, port: number) {
  return (err: unknown): never => {
    const problem = BIND_PROBLEMS[(err as { code?: string }).code ?? ""];
    if (!problem) throw err;
    throw new ConfigError(`${hostForUrl(host)}:${port} ${problem}: change ${portSetting} or ${hostSetting}`);
  };
}

function hostForUrl(host: string) {
  return host.includes(":") ? `[${host}]` : host;
}

/**
 * A gateway's transport to core across the network. It closes its own idle connection before core
 * would, so core never ends one just as a call starts on it; a connection core did end is redialled.
 */
export function coreTransport(dial: { baseUrl: string; nodeOptions: SecureClientSessionOptions }, logger: Logger): Transport {
  return createGrpcTransport({
    baseUrl: dial.baseUrl,
    nodeOptions: dial.nodeOptions,
    idleConnectionTimeoutMs: CORE_IDLE_SESSION_MS / 2,
    interceptors: [coreUnreachable(logger)],
  });
}
