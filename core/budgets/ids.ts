import { sha256Hex } from "../../lib/crypto.js";

/** JSON with sorted keys: the identity of a request's parameters for idempotency. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/**
 * A UUID that is a pure function of its parts (RFC 9562 version 8: custom, from SHA-256),
 * for ledger transactions whose id is their idempotency key.
 */
export function derivedId(...parts: string[]): string {
  const h = sha256Hex(parts.join("\n"));
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
