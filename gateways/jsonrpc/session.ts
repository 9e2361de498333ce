import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Stateless MCP session ids. The id we hand out on `initialize` (Mcp-Session-Id) records
 * what was negotiated there — the protocol revision and whether the client can show URL
 * elicitations — signed, so any replica can read it back without a session store.
 *
 * It is not a credential: every call still authenticates with its bearer, and the id only
 * chooses how a result is presented. It is never required; one that is missing, malformed,
 * or signed with another key is read as "no capabilities".
 *
 * Format (visible ASCII, as MCP requires): `mcp1.<revision>.<flags>.<nonce>.<mac>` where
 * flags is `u` (URL elicitation) or `0`, nonce 16 random bytes and mac HMAC-SHA256 over
 * everything before it, both base64url.
 */
export interface McpSession {
  protocolVersion: string;
  urlElicitation: boolean;
}

/** URL-mode elicitation exists from this revision on. */
export const URL_ELICITATION_SINCE = "2025-11-25";

const SHAPE = /^mcp1\.(\d{4}-\d{2}-\d{2})\.([0u])\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;

export function createSessionCodec(key: Uint8Array) {
  const mac = (text: string) => createHmac("sha256", key).update(text).digest();
  return {
    issue(session: McpSession): string {
      const flags = session.urlElicitation ? "u" : "0";
      const body = `mcp1.${session.protocolVersion}.${flags}.${randomBytes(16).toString("base64url")}`;
      return `${body}.${mac(body).toString("base64url")}`;
    },
    /** The session an id records, or undefined for anything we did not sign. */
    read(header: string | string[] | undefined): McpSession | undefined {
      if (typeof header !== "string" || header.length > 128) return undefined;
      const m = SHAPE.exec(header);
      if (!m) return undefined;
      // Compared as text, so a non-canonical encoding of the right bytes is refused too.
      const given = Buffer.from(m[4]!);
      const expected = Buffer.from(mac(header.slice(0, header.length - m[4]!.length - 1)).toString("base64url"));
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
      return { protocolVersion: m[1]!, urlElicitation: m[2] === "u" && m[1]! >= URL_ELICITATION_SINCE };
    },
  };
}

/** What initialize's `capabilities.elicitation` says about URL mode (MCP 2025-11-25). */
export function declaresUrlElicitation(capabilities: unknown): boolean {
  if (!isObject(capabilities) || !isObject(capabilities.elicitation)) return false;
  return isObject(capabilities.elicitation.url);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
