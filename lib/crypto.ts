import * as nodeCrypto from "node:crypto";
import { createHash, createHmac, timingSafeEqual } from "node:crypto";

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

/** HMAC-SHA-256 of `value` under `key`, in the given encoding. */
export function hmacSha256(key: string | Buffer, value: string, encoding: "hex" | "base64url" | "base64" = "hex"): string {
  return createHmac("sha256", key).update(value).digest(encoding);
}
