import { randomBytes } from "node:crypto";
import { hmacSha256 } from "../../../lib/crypto.js";

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

/**
 * A secret an operator may set: parseable, and its base64 exactly as an encoder writes it
 * (padding included), since strict decoders at the receiving end refuse anything else.
 */
export function isCanonicalWebhookSecret(secret: string): boolean {
  const key = parseWebhookSecret(secret);
  return key !== undefined && PREFIX + key.toString("base64") === secret;
}

/** Standard Webhooks headers for one delivery: HMAC-SHA256 over `id.timestamp.body`, one `v1,` signature per secret. */
export function signWebhook(secrets: string | readonly string[], id: string, timestampSeconds: number, body: string): Record<string, string> {
  const signatures = (typeof secrets === "string" ? [secrets] : secrets).map((secret) => {
    const key = parseWebhookSecret(secret);
    if (!key) throw new Error("unusable webhook secret");
    return `v1,${hmacSha256(key, `${id}.${timestampSeconds}.${body}`, "base64")}`;
  });
  return {
    "webhook-id": id,
    "webhook-timestamp": String(timestampSeconds),
    "webhook-signature": signatures.join(" "),
  };
}

export { createSecretBox, type SecretBox } from "../../../lib/crypto.js";
