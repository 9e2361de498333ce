/**
 * The same text rules as core (lib/text.ts), applied at the edge so each surface answers a 400
 * naming the field; core still refuses them for callers that reach it directly.
 */
import { codePointLength, textProblem } from "../../lib/text.js";

export { codePointLength, textProblem };

export interface BadText {
  /** Where: `a.b[2].c` (field names as the caller sent them; for a bad field name, the object holding it). */
  path: string;
  problem: string;
  /** "<path> <problem>", ready for an error message. */
  message: string;
}

/**
 * The first string (value or object key) in a parsed JSON value or form that is not acceptable text.
 * `whole` names the value itself in messages ("the body", "the query string").
 */
export function findBadText(value: unknown, path = "", whole = "the body"): BadText | undefined {
  if (typeof value === "string") {
    const problem = textProblem(value);
    return problem ? bad(path || whole, problem) : undefined;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findBadText(value[i], `${path}[${i}]`, whole);
      if (found) return found;
    }
    return undefined;
  }
  if (value instanceof Map) {
    for (const [k, v] of value) {
      const found = checkEntry(String(k), v, path, whole);
      if (found) return found;
    }
    return undefined;
  }
  if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      const found = checkEntry(k, v, path, whole);
      if (found) return found;
    }
  }
  return undefined;
}

function checkEntry(key: string, v: unknown, path: string, whole: string): BadText | undefined {
  const keyProblem = textProblem(key);
  if (keyProblem) return bad(path || whole, `has a field name that ${keyProblem}`);
  return findBadText(v, path ? `${path}.${key}` : key, whole);
}

function bad(path: string, problem: string): BadText {
  return { path, problem, message: `${path} ${problem}` };
}
