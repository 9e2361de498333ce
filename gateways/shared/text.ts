/**
 * Text rules at the edge, the same as core's (gateways never import core): lengths count
 * Unicode code points, and text may not hold NUL or unpaired surrogates. Refusing them
 * here gives each surface its own 400 naming the field; core refuses them again for
 * callers that reach it directly.
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

const BAD_TEXT = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why `s` is not acceptable text, or undefined when it is. */
export function textProblem(s: string): string | undefined {
  const m = BAD_TEXT.exec(s);
  if (!m) return undefined;
  return m[0] === "\u0000" ? "must not contain NUL characters" : "must be valid Unicode text (it holds an unpaired surrogate)";
}

export interface BadText {
  /** Where: `a.b[2].c` (field names as the caller sent them; for a bad field name, the object holding it). */
  path: string;
  problem: string;
  /** "<path> <problem>", ready for an error message. */
  message: string;
}

/** The first string (value or object key) in a parsed JSON value or form that is not acceptable text. */
export function findBadText(value: unknown, path = ""): BadText | undefined {
  if (typeof value === "string") {
    const problem = textProblem(value);
    return problem ? bad(path || "the body", problem) : undefined;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findBadText(value[i], `${path}[${i}]`);
      if (found) return found;
    }
    return undefined;
  }
  if (value instanceof Map) {
    for (const [k, v] of value) {
      const found = checkEntry(String(k), v, path);
      if (found) return found;
    }
    return undefined;
  }
  if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      const found = checkEntry(k, v, path);
      if (found) return found;
    }
  }
  return undefined;
}

function checkEntry(key: string, v: unknown, path: string): BadText | undefined {
  const keyProblem = textProblem(key);
  if (keyProblem) return bad(path || "the body", `has a field name that ${keyProblem}`);
  return findBadText(v, path ? `${path}.${key}` : key);
}

function bad(path: string, problem: string): BadText {
  return { path, problem, message: `${path} ${problem}` };
}
