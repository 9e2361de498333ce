import { isIP } from "node:net";

/**
 * The network a per-address limit or fair share counts a caller in: an IPv4 address itself, an
 * IPv6 address's /64 (one subscriber's usual allocation, so cycling addresses within it gains nothing).
 */
export function clientNetwork(address: string): string {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (isIP(address) !== 6) return address;
  return `${ipv6Groups(address).slice(0, 4).join(":")}::/64`;
}

/** The eight groups of a valid IPv6 address, without leading zeros ("::" expanded, an IPv4 tail as two groups). */
function ipv6Groups(address: string): string[] {
  let s = address.split("%")[0]!;
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    s = `${s.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = s.split("::") as [string, string | undefined];
  const first = head ? head.split(":") : [];
  const last = tail ? tail.split(":") : [];
  const groups = tail === undefined ? first : [...first, ...Array<string>(8 - first.length - last.length).fill("0"), ...last];
  return groups.map((g) => Number.parseInt(g, 16).toString(16));
}
