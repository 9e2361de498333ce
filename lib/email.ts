import { domainToASCII, domainToUnicode } from "node:url";

// RFC 5322 atext, plus non-ASCII text as RFC 6531 allows, but no control, format (zero-width,
// bidi), separator, private-use or unassigned character: the address is shown to people.
const ATEXT = String.raw`(?:[A-Za-z0-9!#$%&'*+/=?^_\x60{|}~-]|[^\x00-\x7f\p{C}\p{Z}])`;
const DOT_ATOM = `${ATEXT}+(?:\\.${ATEXT}+)*`;
const LOCAL_PART = new RegExp(`^${DOT_ATOM}$`, "u");
/** One DNS label in its ASCII (A-label) form: letters, digits, inner hyphens, 1 to 63 octets. */
const LDH_LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
const U_CHAR = String.raw`(?:[A-Za-z0-9]|[^\x00-\x7f\p{C}\p{Z}])`;
const U_LABEL = `${U_CHAR}(?:(?:${U_CHAR}|-)*${U_CHAR})?`;
/** The address rule as a JSON Schema (ECMA-262, Unicode) pattern, for API documents; octet lengths and IDNA are code's. */
export const EMAIL_PATTERN = `^(?=[^@]{1,64}@)${DOT_ATOM}@(?:${U_LABEL}\\.)+(?![0-9]+$)${U_LABEL}$`;

/** RFC 5321 4.5.3.1: local part 64 octets, the whole address (its path less `<>`) 254. */
export const MAX_LOCAL_OCTETS = 64;
export const MAX_ADDRESS_OCTETS = 254;

/**
 * The one spelling of an e-mail address identity keys on, or undefined when it is not one plain
 * address: trimmed, local part lower-cased in NFC, domain through IDNA (so `BÜCHER.de`,
 * `bücher.de` in NFD and `xn--bcher-kva.de` are one domain), shown in Unicode.
 */
export function canonicalEmail(value: string): string | undefined {
  const trimmed = value.trim();
  const at = trimmed.indexOf("@");
  if (at <= 0 || at !== trimmed.lastIndexOf("@") || trimmed.length > 1024) return undefined;
  const local = trimmed.slice(0, at).normalize("NFC").toLowerCase().normalize("NFC");
  if (!LOCAL_PART.test(local) || Buffer.byteLength(local, "utf8") > MAX_LOCAL_OCTETS) return undefined;
  const domain = trimmed.slice(at + 1);
  // The URL host parser would percent-decode: an e-mail domain has no such escapes.
  const ascii = domain.includes("%") ? "" : domainToASCII(domain.normalize("NFC"));
  if (!isHostName(ascii) || Buffer.byteLength(local, "utf8") + 1 + ascii.length > MAX_ADDRESS_OCTETS) return undefined;
  return `${local}@${domainToUnicode(ascii)}`;
}

/** At least two LDH labels, the last not all digits: no IP address, bracketed literal or bare name. */
function isHostName(ascii: string): boolean {
  const labels = ascii.split(".");
  return labels.length >= 2 && labels.every((l) => LDH_LABEL.test(l)) && !/^[0-9]+$/.test(labels.at(-1)!);
}

/**
 * The spellings `value` may be stored under, most exact first: trimmed and lower-cased, local part
 * in NFC with an IDNA domain, canonicalEmail's, then with A-labels. For finding a stored address
 * that breaks the current rule; [] when not one bounded `x@y`.
 */
export function storedEmailSpellings(value: string): string[] {
  const trimmed = value.trim();
  const at = trimmed.lastIndexOf("@");
  if (at <= 0 || at === trimmed.length - 1 || trimmed.length > 1024 || /\p{Cc}/u.test(trimmed)) return [];
  const domain = trimmed.slice(at + 1);
  const ascii = domain.includes("%") ? "" : domainToASCII(domain.normalize("NFC"));
  const local = trimmed.slice(0, at).normalize("NFC").toLowerCase().normalize("NFC");
  const spellings = [trimmed.toLowerCase(), ascii ? `${local}@${domainToUnicode(ascii)}` : "", canonicalEmail(trimmed) ?? "", ascii ? `${local}@${ascii}` : ""];
  return [...new Set(spellings.filter(Boolean))];
}
