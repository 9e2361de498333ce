import { randomBytes } from "node:crypto";

/** `gpc_<slug>_<8 hex chars>`. */
export function generateClientId(slug: string): string {
  return `gpc_${slug}_${randomBytes(4).toString("hex")}`;
}

/** `gps_` followed by 32 random bytes in base64url. */
export function generateClientSecret(): string {
  return `gps_${randomBytes(32).toString("base64url")}`;
}

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

/** A URL-safe slug: lower-case letters, digits and inner '-', 1-32 characters. */
export function isValidSlug(slug: string): boolean {
  return SLUG.test(slug);
}

// Latin letters that Unicode decomposition leaves whole, spelled as their usual ASCII.
const LATIN_LETTERS: Record<string, string> = { æ: "ae", ð: "d", đ: "d", ħ: "h", ı: "i", ł: "l", ø: "o", œ: "oe", ß: "ss", þ: "th" };

/** Derives a slug from a display name (accents dropped), or undefined when nothing usable remains. */
export function slugFromName(name: string): string | undefined {
  const slug = name
    .normalize("NFKD")
    .toLowerCase()
    .replace(/\p{M}+/gu, "")
    .replace(/[æðđħıłøœßþ]/g, (c) => LATIN_LETTERS[c]!)
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 32)
    .replace(/-+$/, "");
  return slug && isValidSlug(slug) ? slug : undefined;
}
