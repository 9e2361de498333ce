import { lookup as systemLookup, Resolver } from "node:dns/promises";
import { isIP, type LookupFunction } from "node:net";

/**
 * Resolves caller-chosen host names (client metadata documents, webhook URLs) with c-ares, not
 * `dns.lookup`, so a slow name server cannot hold the libuv pool threads the rest of core shares;
 * lookups have their own time limit and at most `maxConcurrent` run, the next one failing at once.
 */
export interface HostResolverOptions {
  /** Name servers (`"127.0.0.1:5353"`, `"[::1]:53"`); default the system's. */
  servers?: string[];
  /** Whole lookup (A and AAAA together), in ms; default 2000. */
  timeoutMs?: number;
  /** Lookups in flight at once; default 16. */
  maxConcurrent?: number;
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export class HostLookupError extends Error {
  override name = "HostLookupError";
  constructor(
    readonly kind: "busy" | "timeout" | "not_found",
    message: string,
  ) {
    super(message);
  }
}

export interface HostResolver {
  /** Every A and AAAA address of `host` (IPv4 first); an IP literal is returned as is. */
  resolve(host: string): Promise<ResolvedAddress[]>;
}

export function createHostResolver(options: HostResolverOptions = {}): HostResolver {
  const timeoutMs = options.timeoutMs ?? 2000;
  const maxConcurrent = options.maxConcurrent ?? 16;
  let inFlight = 0;
  return {
    async resolve(host) {
      const bare = host.startsWith("[") ? host.slice(1, -1) : host;
      const family = isIP(bare);
      if (family) return [{ address: bare, family: family as 4 | 6 }];
      // "localhost" never reaches a name server (RFC 6761): the hosts file answers it.
      if (bare === "localhost" || bare.endsWith(".localhost")) {
        return (await systemLookup(bare, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family as 4 | 6 }));
      }
      if (inFlight >= maxConcurrent) throw new HostLookupError("busy", "too many host name lookups in flight");
      inFlight++;
      // One channel per lookup, so cancelling it at the deadline touches no other lookup.
      const resolver = new Resolver({ timeout: timeoutMs, tries: 1 });
      if (options.servers) resolver.setServers(options.servers);
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          resolver.cancel();
          reject(new HostLookupError("timeout", `no answer from the name server within ${timeoutMs / 1000} s`));
        }, timeoutMs);
      });
      try {
        const answers = await Promise.race([Promise.allSettled([resolver.resolve4(bare), resolver.resolve6(bare)]), deadline]);
        const [v4, v6] = answers;
        const out: ResolvedAddress[] = [
          ...(v4.status === "fulfilled" ? v4.value.map((address) => ({ address, family: 4 as const })) : []),
          ...(v6.status === "fulfilled" ? v6.value.map((address) => ({ address, family: 6 as const })) : []),
        ];
        if (out.length > 0) return out;
        const timedOut = [v4, v6].some((r) => r.status === "rejected" && ["ETIMEOUT", "ECANCELLED"].includes((r.reason as NodeJS.ErrnoException).code ?? ""));
        throw timedOut
          ? new HostLookupError("timeout", `no answer from the name server within ${timeoutMs / 1000} s`)
          : new HostLookupError("not_found", "the host name does not resolve");
      } finally {
        clearTimeout(timer);
        inFlight--;
      }
    },
  };
}

/** A `lookup` for http(s) requests that answers only `target`: the connection goes to the address that was checked, with no second lookup. */
export function pinnedLookup(target: ResolvedAddress): LookupFunction {
  return ((_hostname: string, lookupOptions: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    if (lookupOptions?.all) callback(null, [{ address: target.address, family: target.family }]);
    else callback(null, target.address, target.family);
  }) as unknown as LookupFunction;
}
