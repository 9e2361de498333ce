import { domainToASCII, domainToUnicode } from "node:url";

// No control characters (it is printed on terminals) and none of the address-list syntax a mailer
// parses (`,;:<>()[]"\`): `a,b@evil.test` would mail that account's codes to b@evil.test.
const PART = String.raw`[^\s@\p{Cc},;:<>()[\]"\\]+`;
/** The address rule as a JSON Schema (ECMA-262, Unicode) pattern, for API documents. */
export const EMAIL_PATTERN = `^${PART}@${PART}\\.${PART}$`;
const ADDRESS = new RegExp(EMAIL_PATTERN, "u");

/**
 * The one spelling of an e-mail address identity keys on, or undefined when it is not one plain
 * address: trimmed, local part lower-cased in NFC, domain through IDNA (so `BÜCHER.de`,
 * `bücher.de` in NFD and `xn--bcher-kva.de` are one domain), shown in Unicode.
 */
export function canonicalEmail(value: string): string | undefined {
  const trimmed = value.trim();
  const at = trimmed.lastIndexOf("@");
  if (at <= 0 || trimmed.length > 1024) return undefined;
  const domain = trimmed.slice(at + 1);
  // The URL host parser would percent-decode: an e-mail domain has no such escapes.
  const ascii = domain.includes("%") ? "" : domainToASCII(domain.normalize("NFC"));
  if (!ascii) return undefined;
  const email = `${trimmed.slice(0, at).normalize("NFC").toLowerCase().normalize("NFC")}@${domainToUnicode(ascii)}`;
  if (email.length > 254 || !ADDRESS.test(email)) return undefined;
  return email;
}
