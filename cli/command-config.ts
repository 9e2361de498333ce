import { ConfigError, loadConfig, type Config } from "./config.js";

/**
 * Settings only `serve` reads (it listens and logs; an operator command does neither), with the
 * Config fields taken from each: the public addresses only where PORT gives their default.
 */
const SERVE_ONLY: Record<string, (env: NodeJS.ProcessEnv) => string[]> = {
  PORT: (env) => ["port", ...defaultedByListenAddress(env)],
  HOST: (env) => ["host", ...defaultedByListenAddress(env)],
  LOG_LEVEL: () => ["logLevel"],
};

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
  const refused = new Map<string, ConfigError>();
  for (const name of Object.keys(SERVE_ONLY)) {
    if (!env[name]) continue;
    try {
      loadConfig({ [name]: env[name] });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      refused.set(name, err);
      delete usable[name];
    }
  }
  const config = loadConfig(usable);
  for (const [name, err] of refused) {
    for (const field of SERVE_ONLY[name]!(env)) {
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
