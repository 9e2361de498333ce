import type { FastifyInstance } from "fastify";

interface KnownPath {
  pattern: RegExp;
  methods: Set<string>;
}

/**
 * Remembers which methods each registered path answers, so a request with another method gets
 * 405 and an `Allow` header (RFC 9110 15.5.6) instead of a 404 that says the path is unknown.
 * Call before any route is registered: the onRoute hook sees the routes of every plugin after it.
 */
export function trackRouteMethods(app: FastifyInstance): void {
  const paths = new Map<string, KnownPath>();
  app.addHook("onRoute", (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    let known = paths.get(route.url);
    if (!known) {
      known = { pattern: patternOf(route.url), methods: new Set() };
      paths.set(route.url, known);
    }
    for (const m of methods) known.methods.add(m.toUpperCase());
  });
  app.decorate("allowedMethods", (url: string): string[] => {
    const path = url.split("?", 1)[0]!;
    const allowed = new Set<string>();
    for (const known of paths.values()) if (known.pattern.test(path)) for (const m of known.methods) allowed.add(m);
    return [...allowed].sort();
  });
}

/** A fastify route path as a regular expression: `:name` is one segment, `*` the rest. */
function patternOf(url: string): RegExp {
  const body = url
    .split(/(:[A-Za-z0-9_]+|\*)/)
    .map((part) => (part === "*" ? ".*" : part.startsWith(":") ? "[^/]+" : part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
    .join("");
  return new RegExp(`^${body}$`);
}

declare module "fastify" {
  interface FastifyInstance {
    /** The methods `url`'s path answers (none when no route matches it), sorted. */
    allowedMethods(url: string): string[];
  }
}
