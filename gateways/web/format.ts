import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

const GROUPED = new Intl.NumberFormat("en-US");

/** Whole cents as a bigint: a number must be a safe integer and a string plain digits, so nothing is rounded. */
function wholeCents(cents: bigint | number | string): bigint {
  if (typeof cents === "bigint") return cents;
  if (typeof cents === "number" ? Number.isSafeInteger(cents) : /^-?\d+$/.test(cents)) return BigInt(cents);
  throw new RangeError(`not a whole number of cents: ${String(cents)}`);
}

/**
 * Cents in the vault's currency, e.g. "$12.34" or "12.34 XYZ" for a code Intl does not take.
 * Exact at any size: Intl lays out the sign and symbol, the digits come from bigint arithmetic.
 */
export function money(cents: bigint | number | string, currency: string): string {
  const value = wholeCents(cents);
  const negative = value < 0n;
  const abs = negative ? -value : value;
  const whole = abs / 100n;
  const fraction = String(abs % 100n).padStart(2, "0");
  let layout: Intl.NumberFormatPart[];
  try {
    const options = { style: "currency", currency: currency || "USD", minimumFractionDigits: 2, maximumFractionDigits: 2 } as const;
    layout = new Intl.NumberFormat("en-US", options).formatToParts(negative ? -1 : 1);
  } catch {
    return `${negative ? "-" : ""}${whole}.${fraction} ${currency}`;
  }
  return layout.map((part) => (part.type === "integer" ? GROUPED.format(whole) : part.type === "fraction" ? fraction : part.value)).join("");
}

/** A moment to the minute in UTC ("2026-01-31 09:05 UTC"): a protobuf Timestamp or Unix seconds; "" when absent. */
export function utcMinute(t: Timestamp | bigint | undefined): string {
  if (t === undefined) return "";
  const date = typeof t === "bigint" ? new Date(Number(t) * 1000) : timestampDate(t);
  return `${date.toISOString().replace("T", " ").slice(0, 16)} UTC`;
}
