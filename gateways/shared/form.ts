import { textProblem } from "./text.js";

/** A strictly parsed application/x-www-form-urlencoded body; a failure says what, naming the field when it can. */
export type FormParse = { ok: true; params: Map<string, string>; duplicates: string[] } | { ok: false; message: string };

/** Decodes one form component: '+' is a space, then percent-decoding; undefined if malformed. */
export function formDecode(value: string): string | undefined {
  try {
    return decodeURIComponent(value.replace(/\+/g, " "));
  } catch {
    return undefined;
  }
}

/**
 * Parses a form body, reporting repeated names instead of silently keeping one
 * (RFC 6749 3.1: parameters MUST NOT be included more than once).
 */
export function parseForm(body: string): FormParse {
  const params = new Map<string, string>();
  const duplicates: string[] = [];
  if (body === "") return { ok: true, params, duplicates };
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
    if (params.has(name)) duplicates.push(name);
    else params.set(name, value);
  }
  return { ok: true, params, duplicates };
}
