/** The deepest nesting of arrays and objects a JSON request body may have. */
const MAX_JSON_DEPTH = 64;

/**
 * True when `text` nests deeper than `max`. Checked before JSON.parse because later walks of the
 * parsed value recurse, and very deep bodies overflowed the stack into a 500.
 */
export function jsonTooDeep(text: string, max = MAX_JSON_DEPTH): boolean {
  // Fewer openings than levels cannot be too deep: most bodies stop here, after a few
  // native searches.
  if (!moreOpeningsThan(text, max)) return false;
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      i = endOfString(text, i);
      if (i === -1) return false;
    } else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > max) return true;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      depth--;
    }
  }
  return false;
}

/**
 * The index of the quote that closes the JSON string opening at `start`, or -1: found natively,
 * in one pass however the string is escaped (the next quote not after an odd run of backslashes).
 */
export function endOfString(text: string, start: number): number {
  let i = start;
  for (;;) {
    i = text.indexOf('"', i + 1);
    if (i === -1) return -1;
    let backslashes = 0;
    while (text.charCodeAt(i - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return i;
  }
}

function moreOpeningsThan(text: string, max: number): boolean {
  let count = 0;
  for (const open of ["[", "{"]) {
    for (let i = text.indexOf(open); i !== -1; i = text.indexOf(open, i + 1)) if (++count > max) return true;
  }
  return false;
}

/** The message every surface gives for a body nested too deeply. */
export const TOO_DEEP = `JSON nested more than ${MAX_JSON_DEPTH} levels deep`;
