import { parseScope } from "../../lib/scopes.js";

export type ScopeResolution = { ok: true; scopes: string[] } | { ok: false };

/**
 * An omitted scope asks for every entitlement; an explicit one
 * must be a subset of them.
 */
export function resolveTokenScopes(requested: string | undefined, entitlements: readonly string[]): ScopeResolution {
  // RFC 6749 3.1: a parameter sent without a value is treated as omitted; one of only spaces is malformed.
  if (requested === undefined || requested === "") return { ok: true, scopes: [...entitlements] };
  const scopes = parseScope(requested);
  if (!scopes?.every((s) => entitlements.includes(s))) return { ok: false };
  return { ok: true, scopes };
}
