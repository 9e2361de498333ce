/**
 * Text rules shared by core and the gateways. Lengths count code points (an emoji is one
 * character); NUL is refused because PostgreSQL cannot store it, and unpaired surrogates
 * because they are not Unicode and break JSON columns.
 */

/** Length in Unicode code points (a lone surrogate counts as one). */
export function codePointLength(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

/** True when `s` is between min and max code points long, inclusive. */
export function lengthBetween(s: string, min: number, max: number): boolean {
  // Code points are never more than UTF-16 units, nor fewer than half of them.
  if (s.length < min || s.length > max * 2) return false;
  const n = codePointLength(s);
  return n >= min && n <= max;
}

// NUL, a high surrogate not followed by a low one, or a low one not preceded by a high one.
const BAD_TEXT = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `s` is not acceptable text (NUL or an unpaired surrogate), or undefined when it is. */
export function textProblem(s: string): string | undefined {
  const m = BAD_TEXT.exec(s);
  if (!m) return undefined;
  return m[0] === "\u0000" ? "must not contain NUL characters" : "must be valid Unicode text (it holds an unpaired surrogate)";
}

/** Why parsed JSON is not acceptable text: its first string (key or value) with NUL or an unpaired surrogate, or its depth. */
export function jsonTextProblem(value: unknown, depth = 0): string | undefined {
  if (depth > 32) return "nests too deeply";
  if (typeof value === "string") return textProblem(value) && `text ${textProblem(value)}`;
  if (Array.isArray(value)) {
    for (const v of value) {
      const p = jsonTextProblem(v, depth + 1);
      if (p) return p;
    }
  } else if (typeof value === "object" && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      const p = jsonTextProblem(k, depth + 1) ?? jsonTextProblem(v, depth + 1);
      if (p) return p;
    }
  }
  return undefined;
}

/** True when `s` holds a control character (Unicode Cc: C0, DEL and C1, such as the CSI escape). */
export function hasControlCharacters(s: string): boolean {
  return /\p{Cc}/u.test(s);
}

/**
 * What a name people read may not hold, as a regular-expression class (JSON Schema patterns reuse it):
 * control characters, the line and paragraph separators, and the bidirectional marks, embeddings,
 * overrides and isolates, which make a name read other than as stored (Trojan Source).
 */
export const NAME_FORBIDDEN_CLASS = "\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028\\u2029\\u202A-\\u202E\\u2066-\\u2069";
const NAME_FORBIDDEN = new RegExp(`[${NAME_FORBIDDEN_CLASS}]`);
const NAME_FORBIDDEN_ALL = new RegExp(`[${NAME_FORBIDDEN_CLASS}]`, "g");

/** `name` with every character `nameProblem` refuses taken out: for a label its owner gives once a ceremony is done (a passkey's). */
export function withoutForbiddenNameCharacters(name: string): string {
  return name.replace(NAME_FORBIDDEN_ALL, "");
}

/** Why `name` (a budget's, a client's, a partner's) may not be shown to a person as written, or undefined; blankness and length are each caller's. */
export function nameProblem(name: string): string | undefined {
  const problem = textProblem(name);
  if (problem) return problem;
  const found = NAME_FORBIDDEN.exec(name)?.[0];
  if (found === undefined) return undefined;
  return /\p{Cc}/u.test(found) ? "must not contain control characters" : "must not contain line or paragraph separators or bidirectional controls";
}

/**
 * A name someone else chose (an agent's budget, a client), isolated from the text around it
 * (FSI ... PDI, which also closes any bidi override inside): the text can never be reordered by it.
 */
export function isolated(name: string): string {
  return `\u2068${name}\u2069`;
}

/**
 * At most `max` code points of text someone else wrote (a library's error quoting a request), fit for
 * an audit row or a log line: control characters and unpaired surrogates become "?".
 */
export function quotedExcerpt(text: string, max: number): string {
  return Array.from(text.slice(0, max * 2))
    .slice(0, max)
    .map((c) => (/\p{Cc}|^[\uD800-\uDFFF]$/u.test(c) ? "?" : c))
    .join("");
}
