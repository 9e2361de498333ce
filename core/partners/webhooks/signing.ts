import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";

const PREFIX = "whsec_";

/** A fresh Standard Webhooks secret: `whsec_` + base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString("base64");
}

/** Accepts `whsec_<base64>` with 24 to 64 key bytes (Standard Webhooks); undefined otherwise. */
export function parseWebhookSecret(secret: string): Buffer | undefined {
  if (!secret.startsWith(PREFIX)) return undefined;
  const b64 = secret.slice(PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) return undefined;
  const key = Buffer.from(b64, "base64");
  return key.length >= 24 && key.length <= 64 ? key : undefined;
}

/** Standard Webhooks headers for one delivery: HMAC-SHA256 over `id.timestamp.body`. */
export function signWebhook(secret: string, id: string, timestampSeconds: number, body: string): Record<string, string> {
  const key = parseWebhookSecret(secret);
  if (!key) throw new Error("unusable webhook secret");
  const signature = createHmac("sha256", key).update(`${id}.${timestampSeconds}.${body}`).digest("base64");
  return {
    "webhook-id": id,
    "webhook-timestamp": String(timestampSeconds),
    "webhook-signature": `v1,${signature}`,
  };
}

/**
 * Webhook secrets must be usable for signing, so they cannot be hashed; they are kept
 * encrypted (AES-256-GCM) under a per-deployment key kept outside the database
 * (core/keys/outside-keys.ts).
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
