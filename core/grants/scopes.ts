import { STEP_UP_SCOPES } from "../../lib/vocabulary.js";

export function isSubset(wanted: readonly string[], allowed: readonly string[]): boolean {
  return wanted.every((s) => allowed.includes(s));
}

export function needsStepUp(scopes: readonly string[]): boolean {
  return scopes.some((s) => (STEP_UP_SCOPES as readonly string[]).includes(s));
}
