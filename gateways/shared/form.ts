import { textProblem } from "./text.js";

/** A strictly parsed application/x-www-form-urlencoded body; a failure says what, naming the field when it can. */
export type FormParse = { ok: true; params: Map<string, string>; lists: Map<string, string[]>; duplicates: string[] } | { ok: false; message: string };

export interface FormOptions {
  /** Names that may be sent more than once (RFC 8707 `resource`): every value is in `lists`, in order, never a duplicate. */
  repeatable?: readonly string[];
  /** RFC 6749 3.1: a parameter sent without a value is treated as omitted (a repeat of it still counts). */
  omitEmpty?: boolean;
}

/** Decodes one form component: '+' is a space, then percent-decoding; undefined if malformed. */
export function formDecode(value: string): string | undefined {
  try {
    return decodeURIComponent(value.replace(/\+/g, " "));
  } catch {
    return undefined;
  }
}

/**
 * Parses a form body (or a query string), reporting repeated names instead of silently
 * keeping one (RFC 6749 3.1: parameters MUST NOT be included more than once).
 */
export function parseForm(body: string, options: FormOptions = {}): FormParse {
  const params = new Map<string, string>();
  const lists = new Map<string, string[]>();
  const seen = new Set<string>();
  const duplicates: string[] = [];
  if (body === "") return { ok: true, params, lists, duplicates };
  for (const pair of body.split("&")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    const name = formDecode(eq === -1 ? pair : pair.slice(0, eq));
    const value = formDecode(eq === -1 ? "" : pair.slice(eq + 1));
    if (name === undefined || value === undefined) return { ok: false, message: "malformed form body" };
    // Percent-decoding cannot yield an unpaired surrogate (it is not UTF-8), but %00 is NUL.
    const nameProblem = textProblem(name);
    if (nameProblem) return { ok: false, message: `a parameter name ${nameProblem}` };
    const valueProblem = textProblem(value);
    if (valueProblem) return { ok: false, message: `${name} ${valueProblem}` };
    const kept = !(options.omitEmpty && value === "");
    if (options.repeatable?.includes(name)) {
      const list = lists.get(name);
      if (kept && list) list.push(value);
      else if (kept) lists.set(name, [value]);
    } else if (seen.has(name)) duplicates.push(name);
    else {
      seen.add(name);
      if (kept) params.set(name, value);
    }
  }
  return { ok: true, params, lists, duplicates };
}
