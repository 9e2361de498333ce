/** RFC 6749 3.3 scope-token: printable ASCII except space, '"' and '\'. */
const TOKEN = "[\\x21\\x23-\\x5B\\x5D-\\x7E]+";
const SCOPE_TOKEN = new RegExp(`^${TOKEN}$`);
/** What parseScope takes, as a published schema's `pattern`: "" (omitted) or tokens separated by single spaces. */
export const SCOPE_PATTERN = `^(${TOKEN}( ${TOKEN})*)?$`;

/**
 * Splits a space-separated scope string into a de-duplicated list; undefined when it is not
 * RFC 6749 3.3 syntax (tokens separated by single spaces), so " " and "a  b" are malformed.
 * Only "" (omitted, or sent without a value: RFC 6749 3.1) gives []; what that means is each caller's.
 */
export function parseScope(value: string): string[] | undefined {
  if (value === "") return [];
  const tokens = value.split(" ");
  if (tokens.some((t) => !SCOPE_TOKEN.test(t))) return undefined;
  return [...new Set(tokens)];
}
