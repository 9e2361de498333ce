import { resolve } from "node:path";

/** Every setting of DESIGN 2, parsed and checked once. The only reader of process.env. */
export interface Config {
  port: number;
  host: string;
  corePort: number;
  /** Gateway role: where core listens. Undefined = in process. */
  coreUrl: string | undefined;
  databaseUrl: string | undefined;
  /** Connections per process to a DATABASE_URL server. */
  databasePoolMax: number;
  dataDir: string;
  baseUrl: string;
  mcpUrl: string;
  authUrl: string;
  appUrl: string;
  issuer: string;
  partnerAudience: string;
  urnNamespace: string;
  /** Raw SIGNING_KEY; a malformed value yields 503s later, never a startup failure. */
  signingKey: string | undefined;
  logLevel: string;
  adminToken: string | undefined;
  tokenIssuanceLimitPerMinute: number;
  /** Failed partner client authentications per client address per minute (docs/partner-token.md). */
  tokenFailuresPerAddressPerMinute: number;
  registrationLimitPerMinute: number;
  /** DESIGN 4.4: agent budget provisioning starts per parent vault per minute. */
  provisioningLimitPerMinute: number;
  /** Partner resource requests per minute per partner and operation (docs/partner-api.md). */
  partnerResourceLimitPerMinute: number;
  /** Base URL of the built-in sandbox KYC provider's hosted pages. */
  kycSandboxUrl: string | undefined;
  /** Webhook delivery loop period (ms). */
  webhookPollMs: number;
  /** DESIGN 3: refresh-token reuse grace window, seconds. */
  refreshGraceSeconds: number;
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const port = intSetting(env, "PORT", 8080, 0, 65535);
  const host = env.HOST || "127.0.0.1";
  const corePort = intSetting(env, "CORE_PORT", 8081, 0, 65535);
  const origin = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  const baseUrl = urlSetting(env, "BASE_URL", origin);
  const logLevel = env.LOG_LEVEL || "info";
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(", ")}`);
  const urnNamespace = env.URN_NAMESPACE || "vaultgate";
  if (!/^[a-z0-9][a-z0-9-]{0,31}$/i.test(urnNamespace)) throw new ConfigError("URN_NAMESPACE must be a URN namespace identifier (letters, digits, '-')");
  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) throw new ConfigError("DATABASE_URL must be a postgres:// URL");
  return {
    port,
    host,
    corePort,
    coreUrl: env.CORE_URL ? urlSetting(env, "CORE_URL", "") : undefined,
    databaseUrl,
    databasePoolMax: intSetting(env, "DATABASE_POOL_MAX", 20, 1, 1000),
    dataDir: resolve(env.DATA_DIR || "./.vaultgate"),
    baseUrl,
    mcpUrl: urlSetting(env, "MCP_URL", origin),
    authUrl: urlSetting(env, "AUTH_URL", origin),
    appUrl: urlSetting(env, "APP_URL", origin),
    issuer: urlSetting(env, "ISSUER", baseUrl),
    partnerAudience: env.PARTNER_AUDIENCE || "urn:vaultgate:partner-api",
    urnNamespace,
    signingKey: env.SIGNING_KEY,
    logLevel,
    adminToken: env.ADMIN_TOKEN || undefined,
    tokenIssuanceLimitPerMinute: intSetting(env, "TOKEN_RATE_LIMIT_PER_MINUTE", 30, 1, 1_000_000),
    tokenFailuresPerAddressPerMinute: intSetting(env, "TOKEN_FAILURES_PER_ADDRESS_PER_MINUTE", 20, 1, 1_000_000),
    registrationLimitPerMinute: intSetting(env, "REGISTRATION_RATE_LIMIT_PER_MINUTE", 20, 1, 1_000_000),
    provisioningLimitPerMinute: intSetting(env, "PROVISIONING_RATE_LIMIT_PER_MINUTE", 10, 1, 1_000_000),
    partnerResourceLimitPerMinute: intSetting(env, "PARTNER_RESOURCE_RATE_LIMIT_PER_MINUTE", 1200, 1, 1_000_000_000),
    kycSandboxUrl: env.KYC_SANDBOX_URL ? urlSetting(env, "KYC_SANDBOX_URL", "") : undefined,
    webhookPollMs: intSetting(env, "WEBHOOK_POLL_MS", 1000, 10, 3_600_000),
    refreshGraceSeconds: intSetting(env, "REFRESH_GRACE_SECONDS", 30, 0, 3600),
  };
}

function intSetting(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) throw new ConfigError(`${name} must be an integer from ${min} to ${max}`);
  return Number(raw);
}

function urlSetting(env: NodeJS.ProcessEnv, name: string, fallback: string): string {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an absolute http(s) URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new ConfigError(`${name} must be an absolute http(s) URL`);
  return raw.replace(/\/+$/, "");
}
