/**
 * A text[] column as read from a row. PGlite and pg return arrays; the literal `{a,b}`
 * is read too, defensively, for a driver that returns the text form (elements unquoted).
 */
export function textArray(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === "string")
    return value
      .replace(/^\{|\}$/g, "")
      .split(",")
      .filter(Boolean);
  return [];
}
