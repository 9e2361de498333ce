import * as nodeCrypto from "node:crypto";
import {
  createCipheriv,
  createDecipheriv,
  createECDH,
  createHash,
  createHmac,
  createPrivateKey,
  type KeyObject,
  randomBytes,
  timingSafeEqual,
} from "node:crypto";

/** Constant-time equality for secrets, hashes and CSRF tokens of any length. */
export function constantTimeEqual(a: string, b: string): boolean {
  // Hash first so unequal lengths cost the same and leak nothing.
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}

/** Constant-time equality of two digests; their lengths are public (a digest's is fixed). */
export function constantTimeEqualBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * One-shot SHA-256 (`crypto.hash`, Node 20.12 and later) is cheaper than a Hash object, on
 * every token, code and client secret a request presents; older Node 20 gets the Hash object.
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

/** The UUID PostgreSQL's `md5(text)::uuid` gives: ids derived in SQL and in code alike. */
export function md5Uuid(text: string): string {
  const h = createHash("md5").update(text).digest("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** A UUID that is a pure function of its parts (RFC 9562 version 8: custom, from SHA-256). */
export function derivedUuid(...parts: string[]): string {
  const h = sha256Hex(parts.join("\n"));
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** HMAC-SHA-256 of `value` under `key`, in the given encoding. */
export function hmacSha256(key: string | Buffer, value: string, encoding: "hex" | "base64url" | "base64" = "hex"): string {
  return createHmac("sha256", key).update(value).digest(encoding);
}

/**
 * AES-256-GCM for secrets that must stay usable (webhook signing secrets, dev outbox
 * bodies), under a 32-byte key kept outside the database.
 */
export function createSecretBox(key: Buffer) {
  if (key.length !== 32) throw new Error("secret box key must be 32 bytes");
  return {
    seal(plain: string): string {
      const iv = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      const ct = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()]);
      return Buffer.concat([iv, cipher.getAuthTag(), ct]).toString("base64url");
    },
    open(sealed: string): string {
      const raw = Buffer.from(sealed, "base64url");
      const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString("utf8");
    },
  };
}

export type SecretBox = ReturnType<typeof createSecretBox>;

/**
 * A new EC P-256 private key. Not from generateKeyPair(Sync): on Node 20 the collected generation job
 * and an export of its key to JWK can take one lock twice, hanging the thread; an imported key has no job.
 */
export function newP256PrivateKey(): KeyObject {
  const ecdh = createECDH("prime256v1");
  const point = ecdh.generateKeys();
  const part = (b: Buffer) => Buffer.concat([Buffer.alloc(32 - b.length), b]).toString("base64url");
  return createPrivateKey({
    key: { kty: "EC", crv: "P-256", d: part(ecdh.getPrivateKey()), x: part(point.subarray(1, 33)), y: part(point.subarray(33, 65)) },
    format: "jwk",
  });
}
