import { formDecode } from "./form.js";

/**
 * Reads `Authorization: Basic` client credentials, each part form-decoded first
 * (RFC 6749 2.3.1). Undefined when the header is not well-formed Basic; callers answer
 * that as a failed client authentication.
 */
export function parseBasicCredentials(header: string): { clientId: string; clientSecret: string } | undefined {
  const parts = basicParts(header);
  const clientSecret = parts && formDecode(parts.secret);
  if (!parts || parts.clientId === undefined || clientSecret === undefined) return undefined;
  return { clientId: parts.clientId, clientSecret };
}

/** The form-decoded client id of well-formed Basic credentials, even when their secret part does not decode. */
export function basicClientId(header: string): string | undefined {
  return basicParts(header)?.clientId;
}

function basicParts(header: string): { clientId: string | undefined; secret: string } | undefined {
  const match = /^Basic +([A-Za-z0-9+/]+={0,2})$/i.exec(header.trim());
  if (!match) return undefined;
  const decoded = Buffer.from(match[1]!, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  if (colon === -1) return undefined;
  return { clientId: formDecode(decoded.slice(0, colon)), secret: decoded.slice(colon + 1) };
}
