/** A text[] column as the driver returns it: an array, or the literal `{a,b}` (PGlite). */
export function textArray(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === "string")
    return value
      .replace(/^\{|\}$/g, "")
      .split(",")
      .filter(Boolean);
  return [];
}
