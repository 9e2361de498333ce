import { BlockList, isIP } from "node:net";
import { resolve } from "node:path";
import { connectionFromUrl } from "../core/db/database-url.js";
import { parseTrustProxy, type TrustProxy } from "../gateways/shared/client-address.js";
import { parseOutsideKey } from "../core/keys/outside-keys.js";
import { parseSettlementSettings, type SettlementSettings } from "../core/settlement/config.js";
import { checkMailFrom, checkSmtpUrl } from "../core/identity/mail/settings.js";
import { passkeyPageProblem, rpIdCovers } from "../core/identity/relying-party.js";

/** Every setting (docs/configuration.md), parsed and checked once. The only reader of process.env. */
export interface Config {
  port: number;
  host: string;
  corePort: number;
  /** Where core binds (CORE_HOST); its own setting so core never follows the public HOST. */
  coreHost: string;
  /** Gateway role and CLI: where core listens. Undefined = in process (CLI: this host's core). */
  coreUrl: string | undefined;
  /** PEM file paths (resolved) of the core port's TLS: CORE_TLS_CERT, CORE_TLS_KEY, CORE_TLS_CA. */
  coreTls: { certFile: string | undefined; keyFile: string | undefined; caFile: string | undefined };
  /** PEM file paths of the client certificate gateways and the CLI present to core. */
  coreClientTls: { certFile: string | undefined; keyFile: string | undefined };
  /** CORE_ALLOW_CLEARTEXT: the operator accepts h2c to or from a non-loopback core address. */
  coreAllowCleartext: boolean;
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
  /** WEBHOOK_SECRET_KEY / SIGNIN_CODE_KEY: keys outside the database; unset = files in DATA_DIR. */
  webhookSecretKey: string | undefined;
  signinCodeKey: string | undefined;
  logLevel: string;
  adminToken: string | undefined;
  /** GATEWAY_TOKEN: lets gateways vouch for client addresses; never logged. */
  gatewayToken: string | undefined;
  tokenIssuanceLimitPerMinute: number;
  registrationLimitPerMinute: number;
  /** Passkey and provider sign-ins started without a session, per client address per minute. */
  signinFlowStartsPerMinute: number;
  /** Agent budget provisioning starts per parent vault per minute. */
  provisioningLimitPerMinute: number;
  /** Partner resource requests per minute per partner and operation (docs/reference/partner-api.md). */
  partnerResourceLimitPerMinute: number;
  /** Base URL of the built-in sandbox KYC provider's hosted pages. */
  kycSandboxUrl: string | undefined;
  /** TRUST_PROXY: which forwarded-for entries name the client (off: the TCP peer). */
  trustProxy: TrustProxy;
  /** ALLOWED_ORIGINS: origins besides the four public addresses that browsers and MCP clients may use. */
  allowedOrigins: string[];
  /** Webhook delivery loop period (ms). */
  webhookPollMs: number;
  /** Refresh-token reuse grace window, seconds. */
  refreshGraceSeconds: number;
  /** SHUTDOWN_GRACE_SECONDS: how long `serve` lets in-flight work finish after SIGTERM or SIGINT. */
  shutdownGraceSeconds: number;
  /** CLIENT_METADATA_ALLOW_PRIVATE: development only; client metadata documents on private/loopback addresses (docs/reference/agent-oauth.md). */
  clientMetadataAllowPrivate: boolean;
  /** WEBHOOK_ALLOW_PRIVATE: development only; webhooks to private/loopback addresses (docs/reference/partner-api.md). */
  webhookAllowPrivate: boolean;
  /** METRICS_PORT: where GET /metrics is served (its own listener, never the public port); undefined = off. */
  metricsPort: number | undefined;
  /** METRICS_HOST: the metrics listener's address (default loopback). */
  metricsHost: string;
  /** METRICS_TOKEN: a bearer a scrape must present; required when METRICS_HOST is not loopback. Never logged. */
  metricsToken: string | undefined;
  /** OTEL_TRACES_EXPORTER=otlp turns tracing on; spans go to `endpoint` (OTLP over HTTP). */
  tracing: { exporter: "none" | "otlp"; endpoint: string; serviceName: string };
  /** CHAIN_<NAME>_*: which chains settle on the evm rail, and how (core/settlement/config.ts). */
  settlement: SettlementSettings;
  /** SMTP_URL + MAIL_FROM: account mail sent by SMTP from the outbox; undefined = the dev outbox. */
  smtp: { url: string; from: string } | undefined;
  /** OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_STEP_UP_ACR: a company's identity provider. */
  oidc: OidcSettings | undefined;
  /** SIGNIN_METHODS: how people sign in and step up, in the order the sign-in page offers them. */
  signinMethods: SigninMethod[];
}

export type SigninMethod = "email" | "oidc" | "passkey";

export interface OidcSettings {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Values of which the provider's `acr` (or one `amr` entry) must be one for a step-up; empty = any fresh sign-in. */
  stepUpAcr: string[];
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: NodeJS.ProcessEnv): Config {
  const port = intSetting(env, "PORT", 8080, 0, 65535);
  const host = hostSetting(env, "HOST", "PORT");
  const corePort = intSetting(env, "CORE_PORT", 8081, 0, 65535);
  const origin = new URL(`http://${host.includes(":") ? `[${host}]` : host}:${port}`).origin;
  const baseUrl = publicUrlSetting(env, "BASE_URL", origin);
  const logLevel = env.LOG_LEVEL || "info";
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(", ")}`);
  const urnNamespace = env.URN_NAMESPACE || "vaultgate";
  if (!/^[a-z0-9][a-z0-9-]{0,31}$/i.test(urnNamespace)) throw new ConfigError("URN_NAMESPACE must be a URN namespace identifier (letters, digits, '-')");
  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) throw new ConfigError("DATABASE_URL must be a postgres:// URL");
  if (databaseUrl) checkDatabaseUrl(databaseUrl);
  const coreTls = {
    certFile: pathSetting(env, "CORE_TLS_CERT"),
    keyFile: pathSetting(env, "CORE_TLS_KEY"),
    caFile: pathSetting(env, "CORE_TLS_CA"),
  };
  if (!coreTls.certFile !== !coreTls.keyFile)
    throw new ConfigError("CORE_TLS_CERT and CORE_TLS_KEY must be set together (PEM certificate and its private key)");
  const coreClientTls = { certFile: pathSetting(env, "CORE_TLS_CLIENT_CERT"), keyFile: pathSetting(env, "CORE_TLS_CLIENT_KEY") };
  if (!coreClientTls.certFile !== !coreClientTls.keyFile) throw new ConfigError("CORE_TLS_CLIENT_CERT and CORE_TLS_CLIENT_KEY must be set together");
  const gatewayToken = env.GATEWAY_TOKEN || undefined;
  if (gatewayToken !== undefined && !/^[\x21-\x7e]{16,512}$/.test(gatewayToken)) {
    throw new ConfigError("GATEWAY_TOKEN must be 16 to 512 printable ASCII characters without spaces");
  }
  const metricsPort = env.METRICS_PORT ? intSetting(env, "METRICS_PORT", 0, 0, 65535) : undefined;
  const metricsHost = hostSetting(env, "METRICS_HOST", "METRICS_PORT");
  const metricsToken = env.METRICS_TOKEN || undefined;
  if (metricsToken !== undefined && !/^[\x21-\x7e]{16,512}$/.test(metricsToken)) {
    throw new ConfigError("METRICS_TOKEN must be 16 to 512 printable ASCII characters without spaces");
  }
  if (metricsPort !== undefined && !isLoopbackHost(metricsHost) && !metricsToken) {
    throw new ConfigError(
      `METRICS_HOST=${metricsHost} is not a loopback address: set METRICS_TOKEN so only your scraper can read the metrics, or bind METRICS_HOST=127.0.0.1`,
    );
  }
  const tracesExporter = env.OTEL_TRACES_EXPORTER || "none";
  if (tracesExporter !== "none" && tracesExporter !== "otlp") throw new ConfigError("OTEL_TRACES_EXPORTER must be none or otlp");
  const otlpBase = env.OTEL_EXPORTER_OTLP_ENDPOINT ? urlSetting(env, "OTEL_EXPORTER_OTLP_ENDPOINT", "") : "http://localhost:4318";
  const tracing = {
    exporter: tracesExporter as "none" | "otlp",
    endpoint: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ? urlSetting(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "") : `${otlpBase}/v1/traces`,
    serviceName: env.OTEL_SERVICE_NAME || "vaultgate",
  };
  let trustProxy: TrustProxy;
  try {
    trustProxy = parseTrustProxy(env.TRUST_PROXY);
  } catch (err) {
    throw new ConfigError(`TRUST_PROXY ${(err as Error).message}`);
  }
  const coreHost = hostSetting(env, "CORE_HOST", "CORE_PORT");
  return {
    port,
    host,
    corePort,
    coreHost,
    coreUrl: env.CORE_URL ? originSetting(env, "CORE_URL") : undefined,
    coreTls,
    coreClientTls,
    coreAllowCleartext: boolSetting(env, "CORE_ALLOW_CLEARTEXT", false),
    databaseUrl,
    // Two at least: migrations hold the advisory lock on one connection while they run on another.
    databasePoolMax: intSetting(env, "DATABASE_POOL_MAX", 20, 2, 1000),
    dataDir: resolve(env.DATA_DIR || "./.vaultgate"),
    baseUrl,
    mcpUrl: publicUrlSetting(env, "MCP_URL", origin),
    authUrl: publicUrlSetting(env, "AUTH_URL", origin),
    appUrl: publicUrlSetting(env, "APP_URL", origin),
    issuer: publicUrlSetting(env, "ISSUER", baseUrl),
    partnerAudience: env.PARTNER_AUDIENCE || "urn:vaultgate:partner-api",
    urnNamespace,
    signingKey: env.SIGNING_KEY,
    webhookSecretKey: outsideKeySetting(env, "WEBHOOK_SECRET_KEY"),
    signinCodeKey: outsideKeySetting(env, "SIGNIN_CODE_KEY"),
    logLevel,
    adminToken: env.ADMIN_TOKEN || undefined,
    gatewayToken,
    tokenIssuanceLimitPerMinute: intSetting(env, "TOKEN_RATE_LIMIT_PER_MINUTE", 30, 1, 1_000_000),
    registrationLimitPerMinute: intSetting(env, "REGISTRATION_RATE_LIMIT_PER_MINUTE", 20, 1, 1_000_000),
    signinFlowStartsPerMinute: intSetting(env, "SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE", 30, 1, 1_000_000),
    provisioningLimitPerMinute: intSetting(env, "PROVISIONING_RATE_LIMIT_PER_MINUTE", 10, 1, 1_000_000),
    partnerResourceLimitPerMinute: intSetting(env, "PARTNER_RESOURCE_RATE_LIMIT_PER_MINUTE", 1200, 1, 1_000_000_000),
    kycSandboxUrl: env.KYC_SANDBOX_URL ? urlSetting(env, "KYC_SANDBOX_URL", "") : undefined,
    allowedOrigins: originsSetting(env, "ALLOWED_ORIGINS"),
    trustProxy,
    webhookPollMs: intSetting(env, "WEBHOOK_POLL_MS", 1000, 10, 3_600_000),
    refreshGraceSeconds: intSetting(env, "REFRESH_GRACE_SECONDS", 30, 0, 3600),
    shutdownGraceSeconds: intSetting(env, "SHUTDOWN_GRACE_SECONDS", 25, 1, 3600),
    clientMetadataAllowPrivate: boolSetting(env, "CLIENT_METADATA_ALLOW_PRIVATE", false),
    webhookAllowPrivate: boolSetting(env, "WEBHOOK_ALLOW_PRIVATE", false),
    metricsPort,
    metricsHost,
    metricsToken,
    tracing,
    settlement: settlementSettings(env),
    ...signinSettings(env, publicUrlSetting(env, "AUTH_URL", origin), publicUrlSetting(env, "APP_URL", origin)),
  };
}

function settlementSettings(env: NodeJS.ProcessEnv): SettlementSettings {
  try {
    return parseSettlementSettings(env);
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
}

function intSetting(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) throw new ConfigError(`${name} must be an integer from ${min} to ${max}`);
  return Number(raw);
}

/** A comma-separated list of origins (scheme://host[:port], no path). */
function originsSetting(env: NodeJS.ProcessEnv, name: string): string[] {
  const raw = env[name];
  if (!raw) return [];
  return raw
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((o) => {
      let url: URL;
      try {
        url = new URL(o);
      } catch {
        throw new ConfigError(`${name} must be a comma-separated list of origins such as https://agents.example.com`);
      }
      if ((url.protocol !== "http:" && url.protocol !== "https:") || url.origin !== o.replace(/\/+$/, "")) {
        throw new ConfigError(`${name} must be a comma-separated list of origins such as https://agents.example.com (no path): ${JSON.stringify(o)}`);
      }
      return url.origin;
    });
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
  // Never echoed: a password in it would reach messages and logs.
  if (url.username || url.password) throw new ConfigError(`${name} must not carry a user name or password`);
  // Paths are appended to these; a query or fragment would end up inside every URL built from one.
  if (url.search || url.hash || raw.includes("?") || raw.includes("#")) throw new ConfigError(`${name} must not carry a query or fragment`);
  return raw.replace(/\/+$/, "");
}

/** A public address, written as URLs print it: tokens, resource indicators and Host checks compare it exactly. */
function publicUrlSetting(env: NodeJS.ProcessEnv, name: string, fallback: string): string {
  const value = urlSetting(env, name, fallback);
  const canonical = new URL(value).href.replace(/\/+$/, "");
  if (value !== canonical) throw new ConfigError(`${name} must be written as ${canonical} (lower-case host, no default port)`);
  return value;
}

/** A URL that names a server only (scheme, host, port): core serves its RPCs at fixed paths from the root. */
function originSetting(env: NodeJS.ProcessEnv, name: string): string {
  const url = new URL(urlSetting(env, name, ""));
  if (url.pathname !== "/" || url.search || url.hash) throw new ConfigError(`${name} must be scheme, host and port only, such as http://127.0.0.1:8081`);
  return url.origin;
}

/** What the connection will parse, by the same function (it also reads the sslcert/sslkey/sslrootcert files named). */
function checkDatabaseUrl(raw: string): void {
  try {
    connectionFromUrl(raw);
  } catch (err) {
    // A file the parser could not read is a Node system error (it names the failed call); a bad URL is not.
    if (typeof (err as { syscall?: unknown }).syscall === "string")
      throw new ConfigError(`DATABASE_URL names an ssl file that cannot be read: ${(err as Error).message}`);
    // The driver would fall back to localhost:5432 and migrate whatever database is there.
    throw new ConfigError("DATABASE_URL is not a valid URL (check the port, and percent-encode '#', '/', '?' or '@' in the user name or password)");
  }
}

function boolSetting(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (raw === "true") return true;
  if (raw === "false") return false;
  throw new ConfigError(`${name} must be true or false`);
}

/** A bind address (default loopback): a name, an IPv4 or a bare IPv6 address; URLs are built from it. */
function hostSetting(env: NodeJS.ProcessEnv, name: string, portName: string): string {
  const host = env[name] || "127.0.0.1";
  // "0.0.0.0:8080" or "[::1]" would make every URL built from it invalid, or a bind to no address.
  if (/[\s/[\]]/.test(host) || (host.includes(":") && isIP(host) !== 6)) {
    throw new ConfigError(`${name} must be a host name or IP address, without a port or brackets (the port is ${portName})`);
  }
  return host;
}

function pathSetting(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const raw = env[name];
  return raw ? resolve(raw) : undefined;
}

// ---------------------------------------------------------------------------------------
// The core port on a network: TLS, mTLS, and cleartext only on loopback.

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");

/** True for `localhost`, 127.0.0.0/8 and ::1 (also IPv4-mapped, bracketed as in URLs). */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  if (bare.toLowerCase() === "localhost") return true;
  const family = isIP(bare);
  return family !== 0 && LOOPBACK.check(bare, family === 4 ? "ipv4" : "ipv6");
}

function outsideKeySetting(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  if (!v) return undefined;
  if (!parseOutsideKey(v)) throw new ConfigError(`${name} must be 32 random bytes as base64 or 64 hex digits (e.g. \`openssl rand -base64 32\`)`);
  return v;
}

// ---------------------------------------------------------------------------------------
// How people sign in: mail, a company's OpenID Connect provider, passkeys.

function signinSettings(env: NodeJS.ProcessEnv, authUrl: string, appUrl: string): Pick<Config, "smtp" | "oidc" | "signinMethods"> {
  let smtp: Config["smtp"];
  if (env.SMTP_URL || env.MAIL_FROM) {
    if (!env.SMTP_URL || !env.MAIL_FROM) throw new ConfigError("SMTP_URL and MAIL_FROM must be set together");
    const problem = checkSmtpUrl(env.SMTP_URL) ?? checkMailFrom(env.MAIL_FROM);
    if (problem) throw new ConfigError(problem);
    smtp = { url: env.SMTP_URL, from: env.MAIL_FROM.trim() };
  }
  let oidc: OidcSettings | undefined;
  const named = ["OIDC_ISSUER", "OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET"].filter((n) => env[n]);
  if (named.length > 0) {
    if (named.length < 3) throw new ConfigError("OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET must be set together");
    // Kept exactly as given: discovery compares it with the provider's issuer, a trailing slash included.
    const url = new URL(urlSetting(env, "OIDC_ISSUER", ""));
    const issuer = env.OIDC_ISSUER!.trim();
    if (url.protocol !== "https:" && !isLoopbackHost(url.hostname))
      throw new ConfigError("OIDC_ISSUER must be an https:// URL (http:// only on a loopback address, for development)");
    const clientId = env.OIDC_CLIENT_ID!;
    if (!/^[\x21-\x7e]{1,255}$/.test(clientId)) throw new ConfigError("OIDC_CLIENT_ID must be 1 to 255 printable ASCII characters");
    if (!/^[\x21-\x7e]{1,512}$/.test(env.OIDC_CLIENT_SECRET!)) throw new ConfigError("OIDC_CLIENT_SECRET must be 1 to 512 printable ASCII characters");
    const stepUpAcr = (env.OIDC_STEP_UP_ACR ?? "").split(/[\s,]+/).filter(Boolean);
    if (stepUpAcr.some((v) => !/^[\x21-\x7e]{1,255}$/.test(v)))
      throw new ConfigError("OIDC_STEP_UP_ACR must be acr or amr values separated by spaces or commas");
    oidc = { issuer, clientId, clientSecret: env.OIDC_CLIENT_SECRET!, stepUpAcr };
  } else if (env.OIDC_STEP_UP_ACR) {
    throw new ConfigError("OIDC_STEP_UP_ACR needs OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET");
  }
  const raw = env.SIGNIN_METHODS || (oidc ? "oidc" : "email");
  const methods = raw
    .split(",")
    .map((m) => m.trim())
    .filter(Boolean);
  const known: SigninMethod[] = ["email", "oidc", "passkey"];
  for (const m of methods)
    if (!known.includes(m as SigninMethod)) throw new ConfigError(`SIGNIN_METHODS must be a comma-separated list of ${known.join(", ")} (e.g. oidc,passkey)`);
  if (new Set(methods).size !== methods.length) throw new ConfigError("SIGNIN_METHODS names a method twice");
  if (methods.includes("oidc") && !oidc) throw new ConfigError("SIGNIN_METHODS has oidc: set OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET");
  if (oidc && !methods.includes("oidc")) throw new ConfigError("OIDC_ISSUER is set but SIGNIN_METHODS does not offer oidc");
  // A passkey is registered by a signed-in person, so it cannot be the only way in.
  if (!methods.includes("email") && !methods.includes("oidc"))
    throw new ConfigError("SIGNIN_METHODS must offer email or oidc (a passkey is added after signing in another way)");
  // Refused, not warned: the pages would offer passkey ceremonies the browser can never complete.
  const page = methods.includes("passkey") ? (passkeyPageProblem("APP_URL", appUrl) ?? passkeyPageProblem("AUTH_URL", authUrl)) : undefined;
  if (page)
    throw new ConfigError(
      `SIGNIN_METHODS has passkey, but ${page}. Serve the pages over https under a domain name (http://localhost for development), or leave passkey out of SIGNIN_METHODS`,
    );
  const [appHost, authHost] = [new URL(appUrl).hostname, new URL(authUrl).hostname];
  if (methods.includes("passkey") && !rpIdCovers(appHost, authHost))
    throw new ConfigError(
      `SIGNIN_METHODS has passkey, but AUTH_URL's host ${authHost} is neither APP_URL's host ${appHost} nor under it: passkeys are bound to APP_URL's host, so the consent page could not use them. Serve AUTH_URL on APP_URL's host or a subdomain of it, or leave passkey out of SIGNIN_METHODS`,
    );
  return { smtp, oidc, signinMethods: methods as SigninMethod[] };
}
