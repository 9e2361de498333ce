import { parse, type ConnectionOptions } from "pg-connection-string";

/** Query keys whose meaning is Vaultgate's (docs/configuration.md), whatever the installed parser makes of them. */
const OWN_KEYS = new Set(["sslmode", "uselibpqcompat"]);

/**
 * The pg driver's settings for a postgres:// URL, read by the parser the driver itself uses (an IPv6
 * host loses its brackets), except `sslmode`: every mode but disable and no-verify is verified TLS.
 * Throws what the parser throws (a bad URL; a system error for an ssl file that cannot be read).
 */
export function connectionFromUrl(url: string): ConnectionOptions {
  const { rest, sslmode } = takeOwnKeys(url);
  const config: ConnectionOptions = { ...parse(rest) };
  if (sslmode === "disable") config.ssl = false;
  else if (sslmode) {
    // The parser has already read sslrootcert, sslcert and sslkey into an object when one is named.
    const ssl = typeof config.ssl === "object" ? config.ssl : {};
    config.ssl = sslmode === "no-verify" ? { ...ssl, rejectUnauthorized: false } : ssl;
  }
  return config;
}

/** The URL without the keys we read ourselves (decoded as the parser would), and the last sslmode given. */
function takeOwnKeys(url: string): { rest: string; sslmode: string | undefined } {
  const start = url.indexOf("?");
  if (start < 0) return { rest: url, sslmode: undefined };
  const hash = url.indexOf("#", start);
  const end = hash < 0 ? url.length : hash;
  let sslmode: string | undefined;
  const kept = url
    .slice(start + 1, end)
    .split("&")
    .filter((pair) => {
      const [entry] = new URLSearchParams(pair);
      if (!entry || !OWN_KEYS.has(entry[0])) return true;
      if (entry[0] === "sslmode") sslmode = entry[1];
      return false;
    });
  return { rest: url.slice(0, start) + (kept.length > 0 ? `?${kept.join("&")}` : "") + url.slice(end), sslmode };
}
