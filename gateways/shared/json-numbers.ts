// A string (skipped whole) or a number token of JSON text.
const TOKEN = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
// An integer JavaScript holds exactly whatever its digits: most numbers in a body stop here.
const SMALL_INTEGER = /^-?\d{1,15}$/;

/**
 * JSON text in which every number JSON.parse would change (4.9999999999999999 becomes 5,
 * 9007199254740993 becomes ...992) is replaced by `{"inexact_number": "<its text>"}`. A check
 * then refuses it where a number is expected, instead of acting on a value the caller never sent.
 */
export function markInexactNumbers(text: string): string {
  let out: string | undefined;
  let last = 0;
  for (const m of text.matchAll(TOKEN)) {
    const token = m[0];
    if (token.charCodeAt(0) === 0x22 || SMALL_INTEGER.test(token) || sameValue(token, String(Number(token)))) continue;
    out = `${out ?? ""}${text.slice(last, m.index)}{"inexact_number":"${token}"}`;
    last = m.index + token.length;
  }
  return out === undefined ? text : out + text.slice(last);
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
  let digits = (m[2]! + fraction).replace(/^0+/, "");
  let exponent = Number(m[4] ?? 0) - fraction.length;
  const trimmed = digits.replace(/0+$/, "");
  exponent += digits.length - trimmed.length;
  digits = trimmed;
  return { negative: m[1] === "-", digits, exponent };
}
