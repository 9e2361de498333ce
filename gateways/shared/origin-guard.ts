import type { PublicUrls } from "./public-urls.js";

const DEFAULT_PORTS: Record<string, string> = { "http:": "80", "https:": "443" };

/**
 * DNS-rebinding and cross-site protection (MCP requires Origin validation): the configured public
 * origins, and for Host also loopback literals, since a rebinding attack always arrives under the
 * attacker's own name and local health checks use loopback.
 */
export function createOriginGuard(urls: PublicUrls, allowedOrigins: readonly string[] = []) {
  const configured = [urls.issuer, urls.baseUrl, urls.mcpUrl, urls.authUrl, urls.appUrl, ...allowedOrigins].map((u) => new URL(u));
  const origins = new Set(configured.map((u) => u.origin));
  // RFC 9110 7.2: a Host may name the scheme's default port, which the URL parser leaves out.
  const hosts = new Set(configured.flatMap((u) => (u.port === "" ? [u.host, `${u.host}:${DEFAULT_PORTS[u.protocol]}`] : [u.host]).map((h) => h.toLowerCase())));
  return {
    /**
     * An absent Origin (non-browser clients) is allowed; a present one must be ours, scheme
     * included, or the same origin as a loopback Host (our own page, reached by a loopback address).
     */
    originAllowed(origin: string | undefined, host: string | undefined): boolean {
      if (origin === undefined || origins.has(origin)) return true;
      if (!host || !this.hostAllowed(host)) return false;
      const h = host.toLowerCase();
      // A configured name is served under its configured scheme only: http://ours is not https://ours.
      if (hosts.has(h)) return false;
      return origin === `http://${h}` || origin === `https://${h}`;
    },
    hostAllowed(host: string | undefined): boolean {
      if (!host) return false;
      const h = host.toLowerCase();
      if (hosts.has(h)) return true;
      let hostname: string;
      try {
        hostname = new URL(`http://${h}`).hostname;
      } catch {
        return false;
      }
      return hostname === "localhost" || hostname === "[::1]" || /^127(\.\d{1,3}){3}$/.test(hostname);
    },
  };
}

export type OriginGuard = ReturnType<typeof createOriginGuard>;

/**
 * The path as the router or a proxy would serve it (decoded repeatedly, dot segments resolved,
 * empty segments dropped, lower-cased), so no spelling of a guarded path escapes the guard;
 * over-matching only guards paths that have no route.
 */
export function guardedPath(url: string): string {
  const q = url.indexOf("?");
  let path = q === -1 ? url : url.slice(0, q);
  // Nearly every request: nothing to decode or resolve.
  if (!/[%.\\]|\/\/|\/$|[A-Z]/.test(path)) return path;
  for (let i = 0; i < 4 && path.includes("%"); i++) {
    const decoded = path.replace(/%([0-9a-fA-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    if (decoded === path) break;
    path = decoded;
  }
  const out: string[] = [];
  for (const segment of path.toLowerCase().split(/[/\\]/)) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") out.pop();
    else out.push(segment);
  }
  return `/${out.join("/")}`;
}
