import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

/** Cents in the vault's currency, e.g. "$12.34" or "12.34 XYZ" for a code Intl does not know. */
export function money(cents: bigint | number, currency: string): string {
  const units = Number(cents) / 100;
  try {
    return new Intl.NumberFormat("en-US", { style: "currency", currency: currency || "USD" }).format(units);
  } catch {
    return `${units.toFixed(2)} ${currency}`;
  }
}

/** A moment to the minute in UTC ("2026-01-31 09:05 UTC"): a protobuf Timestamp or Unix seconds; "" when absent. */
export function utcMinute(t: Timestamp | bigint | undefined): string {
  if (t === undefined) return "";
  const date = typeof t === "bigint" ? new Date(Number(t) * 1000) : timestampDate(t);
  return `${date.toISOString().replace("T", " ").slice(0, 16)} UTC`;
}
