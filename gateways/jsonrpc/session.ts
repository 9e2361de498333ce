import { randomBytes } from "node:crypto";
import { constantTimeEqual, hmacSha256 } from "../../lib/crypto.js";

/**
 * Stateless, signed MCP session ids recording what `initialize` negotiated, so any replica can
 * read them without a store. Not a credential: it only chooses how a result is presented, and
 * a missing or bad one means "no capabilities". Format in docs/reference/agent-tools.md.
 */
export interface McpSession {
  protocolVersion: string;
  urlElicitation: boolean;
}

/** URL-mode elicitation exists from this revision on. */
export const URL_ELICITATION_SINCE = "2025-11-25";

const SHAPE = /^mcp1\.(\d{4}-\d{2}-\d{2})\.([0u])\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;

export function createSessionCodec(key: Uint8Array) {
  const macKey = Buffer.from(key);
  const mac = (text: string) => hmacSha256(macKey, text, "base64url");
  return {
    issue(session: McpSession): string {
      const flags = session.urlElicitation ? "u" : "0";
      const body = `mcp1.${session.protocolVersion}.${flags}.${randomBytes(16).toString("base64url")}`;
      return `${body}.${mac(body)}`;
    },
    /** The session an id records, or undefined for anything we did not sign. */
    read(header: string | string[] | undefined): McpSession | undefined {
      if (typeof header !== "string" || header.length > 128) return undefined;
      const m = SHAPE.exec(header);
      if (!m) return undefined;
      // Compared as text, so a non-canonical encoding of the right bytes is refused too.
      if (!constantTimeEqual(m[4]!, mac(header.slice(0, header.length - m[4]!.length - 1)))) return undefined;
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
