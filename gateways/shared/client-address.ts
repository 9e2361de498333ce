import type { IncomingHttpHeaders } from "node:http";
import { BlockList, isIP } from "node:net";

/**
 * TRUST_PROXY: which forwarding entries to believe. `false` (the default): none, the
 * client is the TCP peer. A number n: the peer and the n-1 entries nearest to it are our
 * proxies. A list of CIDRs: any hop whose address is inside one of them is our proxy.
 */
export type TrustProxy = false | number | readonly string[];

/** The largest hop count TRUST_PROXY takes (more proxies than this in a row is a mistake). */
const MAX_TRUSTED_HOPS = 16;

/**
 * Parses a TRUST_PROXY value; throws an Error saying what is wrong (the caller names the
 * setting). Unset, empty or `false` is off; `0` is off too.
 */
export function parseTrustProxy(raw: string | undefined): TrustProxy {
  const text = (raw ?? "").trim();
  if (text === "" || text === "false") return false;
  if (/^\d+$/.test(text)) {
    const hops = Number(text);
    if (hops > MAX_TRUSTED_HOPS) throw new Error(`must be a hop count from 0 to ${MAX_TRUSTED_HOPS} or a comma-separated list of IPv4/IPv6 addresses or CIDRs`);
    return hops === 0 ? false : hops;
  }
  const cidrs = text.split(",").map((s) => s.trim());
  for (const cidr of cidrs) {
    if (!parseCidr(cidr))
      throw new Error(
        `must be a hop count or a comma-separated list of IPv4/IPv6 addresses or CIDRs (such as 10.0.0.0/8, fd00::/8); not ${JSON.stringify(cidr)}`,
      );
  }
  return cidrs;
}

function parseCidr(text: string): { address: string; prefix: number; family: "ipv4" | "ipv6" } | undefined {
  const slash = text.indexOf("/");
  const address = slash === -1 ? text : text.slice(0, slash);
  const family = isIP(address);
  if (family === 0) return undefined;
  const max = family === 4 ? 32 : 128;
  if (slash !== -1 && !/^\d{1,3}$/.test(text.slice(slash + 1))) return undefined;
  const prefix = slash === -1 ? max : Number(text.slice(slash + 1));
  if (prefix > max) return undefined;
  return { address, prefix, family: family === 4 ? "ipv4" : "ipv6" };
}

/** A forwarding entry that is not an address (malformed, `unknown`, an obfuscated node). */
const NOT_AN_ADDRESS = "";

/**
 * The one place a request's client address is decided (limits, and what the gateway vouches to
 * core): walk from the TCP peer past TRUST_PROXY hops; nothing is believed from a peer not ours,
 * and when X-Forwarded-For and Forwarded disagree (one may be forged) the peer is used.
 */
export function createClientAddress(trust: TrustProxy): (peer: string | undefined, headers: IncomingHttpHeaders) => string {
  if (trust === false) return (peer) => normalizeAddress(peer ?? "") || "unknown";
  let trusted: (address: string, hop: number) => boolean;
  if (typeof trust === "number") {
    trusted = (_address, hop) => hop < trust;
  } else {
    const list = new BlockList();
    for (const text of trust) {
      const c = parseCidr(text)!;
      list.addSubnet(c.address, c.prefix, c.family);
    }
    trusted = (address) => {
      const family = isIP(address);
      return family !== 0 && list.check(address, family === 4 ? "ipv4" : "ipv6");
    };
  }
  return (peerRaw, headers) => {
    const peer = normalizeAddress(peerRaw ?? "") || "unknown";
    if (!trusted(peer, 0)) return peer;
    const xff = headers["x-forwarded-for"];
    const forwarded = headers.forwarded;
    const fromXff = xff === undefined ? undefined : walk(peer, forwardedForEntries(xff), trusted);
    const fromForwarded = forwarded === undefined ? undefined : walk(peer, forwardedEntries(forwarded), trusted);
    if (fromXff !== undefined && fromForwarded !== undefined && fromXff !== fromForwarded) return peer;
    return fromXff ?? fromForwarded ?? peer;
  };
}

/**
 * proxy-addr's walk: hop 0 is the peer, hop 1 the entry nearest it, and so on; the first
 * hop not trusted is the client, else the farthest entry. An entry that is not an address
 * stops the walk at the proxy that reported it.
 */
function walk(peer: string, entries: string[], trusted: (address: string, hop: number) => boolean): string {
  let current = peer;
  for (let hop = 0; ; hop++) {
    if (!trusted(current, hop)) return current;
    const next = entries[entries.length - 1 - hop];
    if (next === undefined || next === NOT_AN_ADDRESS) return current;
    current = next;
  }
}

/** `X-Forwarded-For: client, proxy1, proxy2` (repeated headers arrive joined by commas). */
function forwardedForEntries(value: string | string[]): string[] {
  const text = Array.isArray(value) ? value.join(",") : value;
  return text.split(",").map((e) => normalizeAddress(stripPort(e.trim())));
}

/**
 * RFC 7239 `Forwarded`: comma-separated elements of `;`-separated `name=value` pairs,
 * values a token or a quoted string. Each element's `for` node is an entry; an element
 * without one, or that does not parse, is not an address.
 */
function forwardedEntries(value: string | string[]): string[] {
  const text = Array.isArray(value) ? value.join(",") : value;
  const entries: string[] = [];
  let i = 0;
  const n = text.length;
  while (i <= n) {
    // One element: pairs until a comma outside quotes, or the end.
    let node: string | undefined;
    let ok = true;
    for (;;) {
      while (i < n && (text[i] === " " || text[i] === "\t")) i++;
      const nameStart = i;
      while (i < n && /[!#$%&'*+\-.^_`|~0-9A-Za-z]/.test(text[i]!)) i++;
      const name = text.slice(nameStart, i).toLowerCase();
      if (name === "" || text[i] !== "=") ok = false;
      else i++;
      let val = "";
      if (ok && text[i] === '"') {
        i++;
        let closed = false;
        while (i < n) {
          const c = text[i]!;
          if (c === "\\" && i + 1 < n) {
            val += text[i + 1];
            i += 2;
          } else if (c === '"') {
            i++;
            closed = true;
            break;
          } else {
            val += c;
            i++;
          }
        }
        if (!closed) ok = false;
      } else if (ok) {
        const start = i;
        while (i < n && /[!#$%&'*+\-.^_`|~0-9A-Za-z:[\]]/.test(text[i]!)) i++;
        val = text.slice(start, i);
        if (val === "") ok = false;
      }
      if (ok && name === "for") {
        if (node !== undefined) ok = false;
        node = val;
      }
      // Skip to the next pair or element (anything unexpected makes this element bad).
      while (i < n && (text[i] === " " || text[i] === "\t")) i++;
      if (i < n && text[i] === ";" && ok) {
        i++;
        continue;
      }
      if (i < n && text[i] !== ",") {
        ok = false;
        while (i < n && text[i] !== ",") i++;
      }
      break;
    }
    entries.push(ok && node !== undefined ? normalizeAddress(stripPort(node)) : NOT_AN_ADDRESS);
    if (i >= n) break;
    i++; // the comma
  }
  return entries;
}

/** `1.2.3.4:5678` -> `1.2.3.4`; `[2001:db8::1]:443` and `[2001:db8::1]` -> `2001:db8::1`. */
function stripPort(node: string): string {
  if (node.startsWith("[")) {
    const end = node.indexOf("]");
    if (end === -1) return NOT_AN_ADDRESS;
    const rest = node.slice(end + 1);
    if (rest !== "" && !/^:\d{1,5}$/.test(rest)) return NOT_AN_ADDRESS;
    return node.slice(1, end);
  }
  const m = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(node);
  return m ? m[1]! : node;
}

/** An IP address in one spelling (IPv4-mapped IPv6 as IPv4, IPv6 lower case), or "" when it is not one. */
function normalizeAddress(text: string): string {
  const family = isIP(text);
  if (family === 4) return text;
  if (family !== 6) return NOT_AN_ADDRESS;
  const lower = text.toLowerCase();
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(lower);
  return mapped ? mapped[1]! : lower;
}

declare module "fastify" {
  interface FastifyRequest {
    /** The client's address as TRUST_PROXY lets us know it (gateways/shared/client-address.ts). */
    readonly clientAddress: string;
  }
}
