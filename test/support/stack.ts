import { randomBytes } from "node:crypto";
import { createRouterTransport, type Interceptor } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { createCore, type Core, type CoreOptions } from "../../core/core.js";
import type { Db } from "../../core/db/knex.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway, type GatewayOptions } from "../../gateways/app.js";
import { createCoreClients, type CoreClients } from "../../gateways/core-clients.js";
import { createTestClock, type TestClock } from "./clock.js";
import { startRelay } from "./db-relay.js";
import { testDatabase } from "./db.js";
import { createCapturedLogger } from "./logs.js";
import { freePort } from "./ports.js";

export interface TestStack {
  core: Core;
  clock: TestClock;
  /** Clients without credentials (what the gateway uses). */
  clients: CoreClients;
  /** Clients carrying the operator credential, for fixtures via admin RPCs (router transport: real serialization). */
  admin: CoreClients;
  adminToken: string;
  /** The gateway credential the test gateway presents to core. */
  gatewayToken: string;
  /** Core's `iss` and first agent-token `aud`. */
  issuer: string;
  mcpUrl: string;
  logs: ReturnType<typeof createCapturedLogger>;
  /** Gateway base URL (127.0.0.1, ephemeral port) when started with gateway: true. */
  url: string;
  gateway?: FastifyInstance;
  close(): Promise<void>;
}

export interface StackOptions extends Partial<Omit<CoreOptions, "db" | "logger" | "clock" | "adminToken" | "gatewayToken">> {
  gateway?: boolean;
  /**
   * Use the gateway's own address (http://127.0.0.1:<port>) as issuer and as every public
   * URL, so real OAuth clients and browsers can follow discovery and redirects.
   */
  publicUrls?: boolean;
  /** SIGNIN_METHODS of the test core and gateway (default email, with oidc when a provider is set). */
  signinMethods?: string[];
  /** The gateway's port (default: a free one); a browser test may need it before the stack starts. */
  port?: number;
  /** A database other than the shared test database (see `ownDatabase`). */
  database?: Db;
  /** The gateway's whole-request time limit (default the gateway's own). */
  requestTimeoutMs?: number;
  /** ALLOWED_ORIGINS of the gateway. */
  allowedOrigins?: string[];
  /** With publicUrls: AUTH_URL's host, another loopback name than APP_URL's 127.0.0.1 (a split deployment). */
  authHost?: string;
  /** With publicUrls: BASE_URL's host, a third loopback address (127.0.0.2, say), relayed to the gateway. */
  baseHost?: string;
}

export const TEST_ISSUER = "http://vaultgate.test";
export const TEST_AUDIENCE = "urn:vaultgate:partner-api";

/** Core on the shared test database (in-process transport), optionally with the HTTP gateway on port 0. */
export async function startStack(options: StackOptions = {}): Promise<TestStack> {
  const db = options.database ?? (await testDatabase()).db;
  const clock = createTestClock(new Date(), { followRealTime: options.oidc !== undefined });
  const logs = createCapturedLogger();
  const adminToken = randomBytes(16).toString("hex");
  const gatewayToken = randomBytes(16).toString("hex");
  const {
    gateway: withGateway,
    publicUrls,
    database: _database,
    signinMethods,
    port: _port,
    requestTimeoutMs,
    allowedOrigins,
    authHost,
    baseHost,
    ...coreOverrides
  } = options;
  const port = options.port ?? (publicUrls ? await freePort() : 0);
  const origin = `http://127.0.0.1:${port}`;
  const authOrigin = authHost ? `http://${authHost}:${port}` : origin;
  const baseOrigin = baseHost ? `http://${baseHost}:${port}` : origin;
  if (publicUrls) Object.assign(coreOverrides, { issuer: origin, mcpUrl: origin, ...(authHost ? { appUrl: origin, authUrl: authOrigin } : {}) });
  const core = await createCore({
    db: { instance: db },
    logger: logs.logger,
    adminToken,
    gatewayToken,
    issuer: TEST_ISSUER,
    partnerAudience: TEST_AUDIENCE,
    clock,
    migrate: false,
    // Every suite registers from 127.0.0.1; the limit has its own test.
    registrationLimitPerMinute: 1_000_000,
    signinFlowStartsPerMinute: 1_000_000,
    // Every test receiver listens on loopback; the refusal of private receivers has its own test.
    webhookAllowPrivate: true,
    signinMethods,
    ...coreOverrides,
  });
  // The gateway's transport in one process, as `vaultgate serve` wires it.
  const transport = createInProcessTransport(core.routes, core.interceptors);
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${adminToken}`);
    return next(req);
  };
  const adminTransport = createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } });
  let gateway: FastifyInstance | undefined;
  let url = "";
  if (withGateway) {
    const issuer = coreOverrides.issuer ?? TEST_ISSUER;
    const mcpUrl = coreOverrides.mcpUrl ?? issuer;
    gateway = await buildGateway({
      clients: createCoreClients(transport, { gatewayToken }),
      logger: logs.logger,
      urls: publicUrls
        ? { issuer: origin, baseUrl: baseOrigin, authUrl: authOrigin, appUrl: origin, mcpUrl: origin }
        : { issuer, baseUrl: issuer, authUrl: issuer, appUrl: issuer, mcpUrl },
      signinMethods: signinMethods ?? (coreOverrides.oidc ? ["oidc", "email"] : ["email"]),
      requestTimeoutMs,
      allowedOrigins,
    });
    await gateway.listen({ port, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  }
  const relay = withGateway && publicUrls && baseHost ? await startRelay({ host: "127.0.0.1", port }, { host: baseHost, port }) : undefined;
  return {
    core,
    clock,
    clients: createCoreClients(transport),
    admin: createCoreClients(adminTransport),
    adminToken,
    gatewayToken,
    issuer: coreOverrides.issuer ?? TEST_ISSUER,
    mcpUrl: coreOverrides.mcpUrl ?? coreOverrides.issuer ?? TEST_ISSUER,
    logs,
    url,
    gateway,
    async close() {
      await relay?.cut();
      await gateway?.close();
      await core.close();
    },
  };
}

/**
 * The web gateway on `stack`'s core (in-process transport) on a port of its own, offering code and
 * passkey sign-in unless `extra` says otherwise; `extra` adds to its options (e.g. trustProxy).
 */
export async function startSigninGateway(stack: TestStack, extra: Partial<GatewayOptions> = {}): Promise<{ gateway: FastifyInstance; url: string }> {
  const gateway = await buildGateway({
    clients: createCoreClients(createInProcessTransport(stack.core.routes, stack.core.interceptors), { gatewayToken: stack.gatewayToken }),
    logger: stack.logs.logger,
    urls: { issuer: stack.issuer, baseUrl: stack.issuer, authUrl: stack.issuer, appUrl: stack.issuer, mcpUrl: stack.issuer },
    signinMethods: ["email", "passkey"],
    ...extra,
  });
  await gateway.listen({ port: 0, host: "127.0.0.1" });
  return { gateway, url: `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}` };
}

/** A unique slug so tests sharing one database never collide. */
export function uniqueSlug(prefix = "p"): string {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

export { freePort };
