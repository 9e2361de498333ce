import { ConfigError, loadConfig, type Config } from "./config.js";
import { checkDataDirPath } from "./data-dir.js";

/** A command's settings, loaded only when it runs (main imports this then): help works even with a broken environment. */
export function loadSettings(env: NodeJS.ProcessEnv, serving: boolean): Config {
  const config = serving ? loadConfig(env) : loadCommandConfig(env);
  checkDataDirPath(config.dataDir);
  return config;
}

/**
 * Settings only `serve` reads (it listens, logs and serves metrics; an operator command does
 * none of these), in groups checked together, with the Config fields taken from each group:
 * the public addresses only where PORT gives their default.
 */
const SERVE_ONLY: [names: string[], fields: (env: NodeJS.ProcessEnv) => string[]][] = [
  [["PORT"], (env) => ["port", ...defaultedByListenAddress(env)]],
  [["HOST"], (env) => ["host", ...defaultedByListenAddress(env)]],
  [["LOG_LEVEL"], () => ["logLevel"]],
  // Together: a METRICS_HOST off loopback needs METRICS_TOKEN only when METRICS_PORT is set.
  [["METRICS_PORT", "METRICS_HOST", "METRICS_TOKEN"], () => ["metricsPort", "metricsHost", "metricsToken"]],
];

/** The public addresses HOST and PORT give a default to, where no setting of their own is made. */
function defaultedByListenAddress(env: NodeJS.ProcessEnv): string[] {
  const urls = Object.entries({ BASE_URL: "baseUrl", MCP_URL: "mcpUrl", AUTH_URL: "authUrl", APP_URL: "appUrl" });
  return [...urls.filter(([name]) => !env[name]).map(([, field]) => field), ...(env.ISSUER || env.BASE_URL ? [] : ["issuer"])];
}

/**
 * The settings of an operator command: a bad value of a setting only `serve` reads refuses the
 * command only if it reads a field taken from it, as `loadConfig` would have at once.
 */
export function loadCommandConfig(env: NodeJS.ProcessEnv): Config {
  const usable = { ...env };
  const refused: [ConfigError, string[]][] = [];
  for (const [names, fields] of SERVE_ONLY) {
    if (!names.some((name) => env[name])) continue;
    try {
      loadConfig(Object.fromEntries(names.map((name) => [name, env[name]])));
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      refused.push([err, fields(env)]);
      for (const name of names) delete usable[name];
    }
  }
  const config = loadConfig(usable);
  for (const [err, fields] of refused) {
    for (const field of fields) {
      Object.defineProperty(config, field, {
        enumerable: true,
        get() {
          throw err;
        },
      });
    }
  }
  return config;
}
