/** RFC 6749 3.3 scope-token: printable ASCII except space, '"' and '\'. */
const SCOPE_TOKEN = /^[\x21\x23-\x5B\x5D-\x7E]+$/;

/**
 * Splits a space-separated scope string into a de-duplicated list; undefined when it is not
 * RFC 6749 3.3 syntax (tokens separated by single spaces). A blank string (empty or only
 * whitespace) names no scope and gives []: what that means is each caller's rule.
 */
export function parseScope(value: string): string[] | undefined {
  if (value.trim() === "") return [];
  const tokens = value.split(" ");
  if (tokens.some((t) => !SCOPE_TOKEN.test(t))) return undefined;
  return [...new Set(tokens)];
}
