import { CONSENT_SCOPES, PARTNER_SCOPES, TREASURY_SCOPE } from "../../lib/vocabulary.js";

export { CONSENT_SCOPES, PARTNER_SCOPES, TREASURY_SCOPE };

/** RFC 6749 3.3 scope-token: printable ASCII except space, '"' and '\'. */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;

/** Splits a space-delimited scope string; undefined when it is not RFC 6749 3.3 syntax. */
export function parseScopeParam(value: string): string[] | undefined {
  const tokens = value.split(" ");
  if (tokens.some((t) => !SCOPE_TOKEN.test(t))) return undefined;
  return [...new Set(tokens)];
}

export type ScopeResolution = { ok: true; scopes: string[] } | { ok: false };

/**
 * An omitted scope asks for every entitlement; an explicit one
 * must be a subset of them.
 */
export function resolveTokenScopes(requested: string | undefined, entitlements: readonly string[]): ScopeResolution {
  // RFC 6749 3.1: a parameter sent without a value is treated as omitted.
  if (requested === undefined || requested.trim() === "") return { ok: true, scopes: [...entitlements] };
  const scopes = parseScopeParam(requested);
  if (!scopes?.every((s) => entitlements.includes(s))) return { ok: false };
  return { ok: true, scopes };
}
