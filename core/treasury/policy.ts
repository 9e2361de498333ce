import type { TreasuryRecord } from "./records.js";

/** The treasury limit names, in the order they are checked. */
export type LimitName = "per_item_cap" | "per_day_cap" | "lifetime_cap" | "step_up_amount";

/** The UTC day of `at` as YYYY-MM-DD: per-day caps reset at 00:00 UTC. */
export function utcDay(at: Date): string {
  return at.toISOString().slice(0, 10);
}

/**
 * Checks the amounts a batch would newly pay against the treasury's caps and step-up
 * amount. Returns the first limit exceeded, or undefined. Partner batches have no
 * human approval step, so an item above the step-up amount is refused, not held.
 */
export function exceededLimit(treasury: TreasuryRecord, amounts: number[], today: string): LimitName | undefined {
  if (amounts.length === 0) return undefined;
  const largest = Math.max(...amounts);
  const total = amounts.reduce((a, b) => a + b, 0);
  if (treasury.capPerItemCents !== null && largest > treasury.capPerItemCents) return "per_item_cap";
  const spentToday = treasury.spentDay === today ? treasury.spentDayCents : 0;
  if (treasury.capPerDayCents !== null && spentToday + total > treasury.capPerDayCents) return "per_day_cap";
  if (treasury.capLifetimeCents !== null && treasury.spentLifetimeCents + total > treasury.capLifetimeCents) return "lifetime_cap";
  if (treasury.stepUpAmountCents !== null && largest > treasury.stepUpAmountCents) return "step_up_amount";
  return undefined;
}
