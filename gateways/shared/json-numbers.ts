import { endOfString } from "./json-depth.js";

// A JSON number token, matched where a number may start (sticky): linear, no backtracking.
const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
// An integer JavaScript holds exactly whatever its digits: most numbers in a body stop here.
const SMALL_INTEGER = /^-?\d{1,15}$/;

/**
 * JSON text in which every number JSON.parse would change (4.9999999999999999 becomes 5,
 * 9007199254740993 becomes ...992) is replaced by `{"inexact_number": "<its text>"}`. A check
 * then refuses it where a number is expected, instead of acting on a value the caller never sent.
 */
export function markInexactNumbers(text: string): string {
  let out = "";
  let last = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      i = endOfString(text, i);
      if (i === -1) break;
    } else if (c === 0x2d /* - */ || (c >= 0x30 && c <= 0x39)) {
      NUMBER.lastIndex = i;
      const token = NUMBER.exec(text)?.[0];
      if (!token) continue;
      if (!SMALL_INTEGER.test(token) && !sameValue(token, String(Number(token)))) {
        out += `${text.slice(last, i)}{"inexact_number":"${token}"}`;
        last = i + token.length;
      }
      i += token.length - 1;
    }
  }
  return last === 0 ? text : out + text.slice(last);
}

/** True when two decimal numerals (JSON syntax, or JavaScript's String of a number) have one value. */
function sameValue(a: string, b: string): boolean {
  const x = decimal(a);
  const y = decimal(b);
  return x.digits === y.digits && (x.digits === "" || (x.negative === y.negative && x.exponent === y.exponent));
}

/** A numeral as sign, significant digits (no leading or trailing zeros) and a power of ten. */
function decimal(numeral: string): { negative: boolean; digits: string; exponent: number } {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(numeral);
  if (!m) return { negative: false, digits: numeral, exponent: 0 };
  const fraction = m[3] ?? "";
  const all = m[2]! + fraction;
  // Scanned by hand: /0+$/ backtracks over every zero run, seconds of CPU for one 64 KiB numeral.
  let start = 0;
  while (start < all.length && all.charCodeAt(start) === 0x30) start++;
  let end = all.length;
  while (end > start && all.charCodeAt(end - 1) === 0x30) end--;
  const exponent = Number(m[4] ?? 0) - fraction.length + (all.length - end);
  return { negative: m[1] === "-", digits: all.slice(start, end), exponent };
}

/**
 * JSON.parse reviver for text markInexactNumbers changed: each marker becomes NaN, which no
 * check accepts as a number, object or string, so the refusal names the field the numeral was in.
 */
export function inexactAsNaN(_key: string, value: unknown): unknown {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === "inexact_number" && typeof (value as { inexact_number: unknown }).inexact_number === "string" ? Number.NaN : value;
}
