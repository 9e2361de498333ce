import { endOfString } from "./json-depth.js";

/**
 * The first member name that appears twice in one object of `text`, which must be valid JSON
 * (call it after JSON.parse succeeded). JSON.parse keeps the last of two, and another reader of
 * the same body may keep the first, so such a body is refused rather than guessed at.
 */
export function repeatedMember(text: string): string | undefined {
  // One entry per open object (the names seen so far) or array (null).
  const open: (Set<string> | null)[] = [];
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      const end = endOfString(text, i);
      if (end === -1) return undefined;
      const names = open[open.length - 1];
      if (names && isMemberName(text, end + 1)) {
        const raw = text.slice(i + 1, end);
        const name = raw.includes("\\") ? (JSON.parse(text.slice(i, end + 1)) as string) : raw;
        if (names.has(name)) return name;
        names.add(name);
      }
      i = end;
    } else if (c === 0x7b /* { */) {
      open.push(new Set());
    } else if (c === 0x5b /* [ */) {
      open.push(null);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      open.pop();
    }
  }
  return undefined;
}

/** True when the next character after JSON whitespace at `from` is a colon. */
function isMemberName(text: string, from: number): boolean {
  let j = from;
  for (let c = text.charCodeAt(j); c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09; c = text.charCodeAt(++j));
  return text.charCodeAt(j) === 0x3a;
}

/** How a refusal names a repeated member: quoted, and cut short when long. */
export function repeatedMemberMessage(name: string): string {
  const shown = name.length > 64 ? `${name.slice(0, 64)}...` : name;
  return `member ${JSON.stringify(shown)} appears twice in one object`;
}
