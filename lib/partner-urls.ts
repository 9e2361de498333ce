import { isIP } from "node:net";

const OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
/** A host the URL parser reads as an IPv4 address: its last label a number (`127.1`, `0x7f.1`, `2130706433`). */
const ENDS_IN_NUMBER = String.raw`(?:[^/?#@\\:]*\.)?(?:[0-9]+|0[Xx][0-9A-Fa-f]*)\.?(?::|[/?#]|$)`;

/**
 * How a partner's URL (a webhook, a KYC redirect) must be written: `https://` with no `user@`, or `http://` to 127.0.0.1,
 * localhost or [::1]; nothing the parser drops (tab, newline, trailing space), no `%` in the host, IPv4 hosts dotted, no port 0.
 * The OpenAPI document publishes this pattern and core checks the same text, so they agree on every ASCII spelling.
 */
export const PARTNER_URL_PATTERN = String.raw`^(?![\s\S]*[\t\n\r])(?![\s\S]*[\x00-\x20]$)(?:[Hh][Tt][Tt][Pp][Ss]://(?![^/?#]*:0+(?:[/?#]|$))(?:${OCTET}(?:\.${OCTET}){3}(?::[0-9]{0,5})?|(?!${ENDS_IN_NUMBER})[^/?#@\\%]+)|[Hh][Tt][Tt][Pp]://(?:127\.0\.0\.1|[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|\[::1\])(?::(?!0+(?:[/?#]|$))[0-9]{0,5})?)(?:[/?#]|$)`;

const PARTNER_URL = new RegExp(PARTNER_URL_PATTERN, "u");

export function isPartnerUrlSpelling(value: string): boolean {
  if (!PARTNER_URL.test(value)) return false;
  let host: string;
  try {
    host = new URL(value).hostname;
  } catch {
    return false;
  }
  // Beyond the pattern: digits the host's IDNA mapping turns into ASCII (`１２７.0.0.1`) still make an IPv4 host.
  const written = value
    .slice(value.indexOf("//") + 2)
    .split(/[/?#]/, 1)[0]!
    .replace(/:[0-9]*$/, "");
  return isIP(host) !== 4 || written === host;
}
