import { randomBytes } from "node:crypto";

/** A hosted identity-verification provider (behind `POST /users/<id>/kyc/link`). */
export interface KycProvider {
  readonly name: string;
  /** Resolves with a hosted link, or rejects when the provider is unusable. */
  createLink(input: { userId: string; redirectUri?: string; now: Date }): Promise<{ url: string; expiresAt: Date }>;
}

/** Refused by a provider: answered as 503 provider_unavailable. */
export class ProviderUnavailableError extends Error {
  override name = "ProviderUnavailableError";
}

export interface SandboxProviderOptions {
  /** Base URL of the sandbox's hosted pages; must be https (http only on loopback). */
  baseUrl: string;
  /** Link lifetime. */
  ttlSeconds?: number;
}

/**
 * The built-in sandbox: builds a hosted link under its base URL. A base URL it cannot
 * use (not https, or unparsable) makes it unusable rather than handing out a bad link.
 */
export function createSandboxKycProvider(options: SandboxProviderOptions): KycProvider {
  const ttl = options.ttlSeconds ?? 900;
  return {
    name: "sandbox",
    async createLink({ userId, redirectUri, now }) {
      let base: URL;
      try {
        base = new URL(options.baseUrl);
      } catch {
        throw new ProviderUnavailableError("sandbox base URL is not a URL");
      }
      const loopback = ["127.0.0.1", "localhost", "[::1]"].includes(base.hostname);
      if (base.protocol !== "https:" && !(base.protocol === "http:" && loopback)) {
        throw new ProviderUnavailableError("sandbox base URL rejected");
      }
      const url = new URL(`verify/${randomBytes(16).toString("base64url")}`, base.href.endsWith("/") ? base.href : `${base.href}/`);
      url.searchParams.set("user", userId);
      if (redirectUri) url.searchParams.set("redirect_uri", redirectUri);
      return { url: url.toString(), expiresAt: new Date(now.getTime() + ttl * 1000) };
    },
  };
}
