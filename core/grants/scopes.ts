/** The scopes an agent grant may carry. */
export const AGENT_SCOPES = ["accounts:read", "payments:initiate", "payments:simulate", "audit:stream", "agent:budget:create"] as const;

/** Scopes whose approval needs a fresh step-up (they move money or access: a human approves them). */
export const STEP_UP_SCOPES: readonly string[] = ["payments:initiate", "agent:budget:create"];

/** Parses a space-separated scope string into a de-duplicated list; undefined if malformed. */
export function parseScope(value: string): string[] | undefined {
  if (value.trim() === "") return [];
  // RFC 6749 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ), separated by single spaces.
  const parts = value.split(" ");
  if (parts.some((p) => !/^[\x21\x23-\x5B\x5D-\x7E]+$/.test(p))) return undefined;
  return [...new Set(parts)];
}

export function isSubset(wanted: readonly string[], allowed: readonly string[]): boolean {
  return wanted.every((s) => allowed.includes(s));
}

export function needsStepUp(scopes: readonly string[]): boolean {
  return scopes.some((s) => STEP_UP_SCOPES.includes(s));
}
