import { isIP } from "node:net";

/**
 * True for a globally routable IPv4 or IPv6 address: what core may connect to for a caller-chosen
 * URL, so a caller cannot aim core at internal hosts. The ranges are listed in docs/reference/agent-oauth.md.
 */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return isPublicV4(address);
  if (family !== 6) return false;
  const groups = expandV6(address);
  if (!groups) return false;
  // ::ffff:a.b.c.d (mapped) and 64:ff9b::a.b.c.d (NAT64) lead to an IPv4 address.
  const mapped = groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff;
  const nat64 = groups[0] === 0x64 && groups[1] === 0xff9b && groups.slice(2, 6).every((g) => g === 0);
  if (mapped || nat64) return isPublicV4(`${groups[6]! >> 8}.${groups[6]! & 255}.${groups[7]! >> 8}.${groups[7]! & 255}`);
  if ((groups[0]! & 0xe000) !== 0x2000) return false; // not global unicast: ::, ::1, fc00::/7, fe80::/10, ff00::/8, ...
  if (groups[0] === 0x2001 && groups[1] === 0x0db8) return false; // documentation
  if (groups[0] === 0x3fff && groups[1]! < 0x1000) return false; // documentation, 3fff::/20
  if (groups[0] === 0x2002) return false; // 6to4 can wrap any IPv4 address
  if (groups[0] === 0x2001 && groups[1]! < 0x0200) return false; // 2001::/23 protocol assignments (Teredo, ...)
  return true;
}

function isPublicV4(address: string): boolean {
  const [a, b, c] = address.split(".").map(Number) as [number, number, number, number];
  if (a === 0 || a === 10 || a === 127 || a >= 224) return false; // this network, private, loopback, multicast, reserved, broadcast
  if (a === 100 && b >= 64 && b <= 127) return false; // CGNAT 100.64/10
  if (a === 169 && b === 254) return false; // link-local (cloud metadata)
  if (a === 172 && b >= 16 && b <= 31) return false;
  if (a === 192 && b === 168) return false;
  if (a === 192 && b === 0 && (c === 0 || c === 2)) return false; // protocol assignments, TEST-NET-1
  if (a === 192 && b === 88 && c === 99) return false; // 6to4 relay anycast, which can lead anywhere
  if (a === 198 && (b === 18 || b === 19)) return false; // benchmarking
  if (a === 198 && b === 51 && c === 100) return false; // TEST-NET-2
  if (a === 203 && b === 0 && c === 113) return false; // TEST-NET-3
  return true;
}

function expandV6(address: string): number[] | undefined {
  let s = address.toLowerCase().split("%")[0]!;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (v4) {
    const [a, b, c, d] = v4[1]!.split(".").map(Number) as [number, number, number, number];
    s = `${s.slice(0, -v4[1]!.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = s.split("::") as [string, string | undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  const groups = [...h, ...Array(Math.max(0, fill)).fill("0"), ...t].map((g) => parseInt(g, 16));
  return groups.length === 8 && groups.every((g) => g >= 0 && g <= 0xffff) ? groups : undefined;
}
