import { UsageError } from "./commands/types.js";
import type { Config } from "./config.js";
import { databaseAddress } from "./migrate.js";
import type { Role } from "./serve.js";

// `serve` and `migrate`, run inside the CLI process: what they print on start and how a database they cannot use is named.

export async function runMigrate(config: Config) {
  try {
    return await (await import("./migrate.js")).runMigrate(config);
  } catch (err) {
    throw (await unreachable(err, config)) ?? loginRefused(err, config);
  }
}

export async function runServe(config: Config, options: Record<string, string | boolean | undefined>): Promise<number> {
  const role = (options.role ?? "all") as Role;
  if (!["all", "core", "gateway"].includes(role)) throw new UsageError("--role must be all, core or gateway");
  const [{ createLogger }, { serve }] = await Promise.all([import("./logger.js"), import("./serve.js")]);
  const logger = createLogger(config.logLevel);
  const terminal = Boolean(process.stderr.isTTY);
  // A gateway opens no database: it names the core it dials instead.
  const database =
    role === "gateway"
      ? undefined
      : config.databaseUrl
        ? `PostgreSQL at ${databaseAddress(config.databaseUrl)}`
        : `the embedded database in ${config.dataDir}/pgdata`;
  if (terminal) {
    process.stderr.write(
      database ? `Starting Vaultgate (${role}) on ${database}; migrations run first...\n` : `Starting Vaultgate (gateway) for core at ${config.coreUrl}...\n`,
    );
  }
  let running: Awaited<ReturnType<typeof serve>>;
  try {
    running = await serve(config, role, logger);
  } catch (err) {
    throw (await unreachable(err, config)) ?? loginRefused(err, config);
  }
  if (running.gatewayUrl) {
    const failing = await readinessProblems(running.gatewayUrl);
    const urls = {
      dashboard: `${config.appUrl}/dashboard/agents`,
      mcp: `${config.mcpUrl}/mcp/read, /mcp/write, /mcp/treasury`,
      partner_api: `${config.baseUrl}/api/partner`,
      openapi: `${config.baseUrl}/api/partner/openapi.json`,
    };
    if (failing.length === 0) {
      logger.info({ gateway: running.gatewayUrl, core: running.coreUrl ?? config.coreUrl, database, urls }, "Vaultgate is ready");
    } else {
      // Up but not ready: say what fails instead of inviting partners to retry blindly.
      logger.warn({ gateway: running.gatewayUrl, failing }, `Vaultgate started but is not ready: ${failing.join(", ")} failing (GET /readyz)`);
    }
    if (terminal) {
      const lines = [
        failing.length === 0
          ? "Vaultgate is ready."
          : `Vaultgate started, but is NOT ready: ${failing.join(", ")} failing (see GET ${running.gatewayUrl}/readyz and the log).`,
        `  Dashboard      ${urls.dashboard}`,
        `  MCP endpoints  ${config.mcpUrl}/mcp/read  /mcp/write  /mcp/treasury`,
        `  Partner API    ${urls.partner_api}`,
        `  OpenAPI        ${urls.openapi}`,
        running.coreUrl
          ? `  Core (gRPC)    ${running.coreUrl}  (for internal callers; not a web page)`
          : `  Core (gRPC)    ${config.coreUrl}  (dialled by this gateway)`,
        database ? `  Database       ${database}` : "",
        "",
        'Next, in another terminal:  npx vaultgate partner create --name "Acme"    (see the README quick start)',
      ];
      process.stderr.write(`${lines.filter((l, i) => l !== "" || i === lines.length - 2).join("\n")}\n`);
    }
  } else if (running.coreUrl) {
    logger.info({ core: running.coreUrl, database }, "Vaultgate core is up");
    if (terminal) process.stderr.write(`Vaultgate core is listening at ${running.coreUrl} (gRPC, gRPC-Web, Connect) on ${database}.\n`);
  }
  // The lines saying where the service listens go out now, not with the next batch.
  logger.flush();
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  logger.info("shutting down");
  // In-flight work gets the grace period; a second signal or the end of it exits at once.
  const cut = new Promise<"cut">((resolve) => {
    setTimeout(() => resolve("cut"), config.shutdownGraceSeconds * 1000).unref();
    process.once("SIGINT", () => resolve("cut"));
    process.once("SIGTERM", () => resolve("cut"));
  });
  if ((await Promise.race([running.close(), cut])) === "cut") {
    logger.warn({ graceSeconds: config.shutdownGraceSeconds }, "stopped before in-flight work finished (grace period over or a second signal)");
    process.exit(1);
  }
  // Written with the rest of the buffered lines as the process exits (cli/logger.ts).
  logger.info("stopped");
  // An outbound call still waiting on its own timeout must not keep a stopped process alive.
  setTimeout(() => process.exit(0), 500).unref();
  return 0;
}

/** The checks /readyz names as failing (empty when ready). */
async function readinessProblems(gatewayUrl: string): Promise<string[]> {
  try {
    const res = await fetch(`${gatewayUrl}/readyz`);
    if (res.ok) return [];
    const body = (await res.json()) as { failing?: string[] };
    return body.failing?.length ? body.failing : ["readiness"];
  } catch {
    return ["readiness"];
  }
}

/** A database that cannot be reached is a setting to fix, not a crash to read: name the setting. */
async function unreachable(err: unknown, config: Config): Promise<Error | undefined> {
  const { databaseOutage } = await import("../core/interceptors.js");
  if (!databaseOutage(err)) return undefined;
  const setting = config.databaseUrl ? `DATABASE_URL (${databaseAddress(config.databaseUrl)})` : `DATA_DIR (${config.dataDir})`;
  return new Error(`cannot reach the database named by ${setting}: ${(err as Error).message.split("\n")[0]}`);
}

/** A server that refused the user, password or database (SQLSTATE 28xxx, 3D000) names the setting. */
function loginRefused(err: unknown, config: Config): unknown {
  const code = (err as { code?: unknown }).code;
  if (!config.databaseUrl || typeof code !== "string" || !(code.startsWith("28") || code === "3D000")) return err;
  return new Error(`the database server at DATABASE_URL (${databaseAddress(config.databaseUrl)}) refused the login: ${(err as Error).message.split("\n")[0]}`);
}
