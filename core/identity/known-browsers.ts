import { randomBytes } from "node:crypto";
import { KNOWN_BROWSER_SECONDS } from "../../lib/vocabulary.js";
import { constantTimeEqual, hmacSha256 } from "../../lib/crypto.js";
import { deriveKey } from "../keys/outside-keys.js";

/**
 * Known browsers: ones a person signed in with before. Their token (a cookie) is no credential; it
 * only gives that browser a code sign-in budget of its own, so outsiders who spend an account's
 * budget cannot lock its owner out. Stateless: `vgb_<payload>.<HMAC under the outside key>`.
 */
export function createKnownBrowsers(signinCodeKey: Buffer, clock: () => Date) {
  const key = deriveKey(signinCodeKey, "sign-in known browser");
  return {
    /** A new token naming `userId` and a fresh browser id. */
    issue(userId: string): string {
      const payload = Buffer.from(`${userId}.${randomBytes(16).toString("base64url")}.${Math.floor(clock().getTime() / 1000)}`).toString("base64url");
      return `vgb_${payload}.${hmacSha256(key, payload, "base64url")}`;
    },
    /** The browser id when `token` is ours, unexpired and issued for `userId`; else undefined (never an error). */
    browserOf(token: string, userId: string | null): string | undefined {
      const mark = userId ? read(token) : undefined;
      return mark?.owner === userId ? mark.browser : undefined;
    },
  };

  function read(token: string): { owner: string; browser: string } | undefined {
    if (!token.startsWith("vgb_") || token.length > 512) return undefined;
    const [payload, mac, ...rest] = token.slice(4).split(".");
    if (!payload || !mac || rest.length > 0 || !constantTimeEqual(mac, hmacSha256(key, payload, "base64url"))) return undefined;
    const [owner, browser, issued] = Buffer.from(payload, "base64url").toString("utf8").split(".");
    const age = Math.floor(clock().getTime() / 1000) - Number(issued);
    return owner && browser && age >= -60 && age <= KNOWN_BROWSER_SECONDS ? { owner, browser } : undefined;
  }
}

export type KnownBrowsers = ReturnType<typeof createKnownBrowsers>;
