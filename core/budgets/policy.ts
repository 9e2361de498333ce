/** spec 2.1: the chains a budget may allow. */
export const CHAINS = ["eth", "base", "arb", "op", "polygon", "sol"] as const;
/** spec 2.1: budget purposes. */
export const PURPOSES = ["ap", "treasury", "trip", "market-research", "payroll", "multi-chain-concierge", "custom"] as const;
/** spec 2.1 / 8: amount fields are integers 0 to 2^53-1. */
export const MAX_AMOUNT = Number.MAX_SAFE_INTEGER;
/** DESIGN 4.1: a grant's step-up counts for this long after auth_time. */
export const STEP_UP_WINDOW_SECONDS = 600;

export interface Policy {
  status: "draft" | "active";
  amountCapCentsPerTx: number | null;
  amountCapCentsPerDay: number | null;
  amountCapCentsLifetime: number | null;
  stepUpAmountCents: number | null;
  chainAllowlist: string[];
  timeWindowEnd: Date | null;
}

export interface PaymentAsk {
  amountCents: number;
  chain: string;
}

export interface VaultUsage {
  balanceCents: number;
  /** Completed payments of the current UTC day. */
  spentTodayCents: number;
  spentLifetimeCents: number;
}

/**
 * The rule that decided a payment. Limit names are what `policy_denied` reports
 * (never a remaining allowance); `balance` maps to insufficient_funds.
 */
export type Rule =
  | "policy_inactive"
  | "time_window_end"
  | "chain_allowlist"
  | "per_tx_cap"
  | "per_day_cap"
  | "lifetime_cap"
  | "balance"
  | "step_up_amount";

export type Evaluation = { decision: "accept" } | { decision: "step_up"; rule: "step_up_amount" } | { decision: "deny"; rule: Exclude<Rule, "step_up_amount"> };

/**
 * Evaluates a payment against a vault's policy, in a fixed order: policy installed,
 * time window, chain, per-transaction, per-day and lifetime caps, balance, then the
 * step-up amount (so a payment sent for approval could actually run once approved).
 * A payment already approved by the owner skips the step-up rule. Pure: no I/O.
 */
export function evaluatePayment(
  policy: Policy | undefined,
  usage: VaultUsage,
  ask: PaymentAsk,
  now: Date,
  options: { stepUpApproved?: boolean } = {},
): Evaluation {
  if (!policy || policy.status !== "active") return { decision: "deny", rule: "policy_inactive" };
  // The window is open up to and excluding its end instant.
  if (policy.timeWindowEnd && now.getTime() >= policy.timeWindowEnd.getTime()) return { decision: "deny", rule: "time_window_end" };
  if (!policy.chainAllowlist.includes(ask.chain)) return { decision: "deny", rule: "chain_allowlist" };
  if (policy.amountCapCentsPerTx !== null && ask.amountCents > policy.amountCapCentsPerTx) return { decision: "deny", rule: "per_tx_cap" };
  if (policy.amountCapCentsPerDay !== null && usage.spentTodayCents + ask.amountCents > policy.amountCapCentsPerDay) {
    return { decision: "deny", rule: "per_day_cap" };
  }
  if (policy.amountCapCentsLifetime !== null && usage.spentLifetimeCents + ask.amountCents > policy.amountCapCentsLifetime) {
    return { decision: "deny", rule: "lifetime_cap" };
  }
  if (ask.amountCents > usage.balanceCents) return { decision: "deny", rule: "balance" };
  if (!options.stepUpApproved && policy.stepUpAmountCents !== null && ask.amountCents > policy.stepUpAmountCents) {
    return { decision: "step_up", rule: "step_up_amount" };
  }
  return { decision: "accept" };
}

/** DESIGN 4.1: a grant counts as stepped up when acr = step-up and auth_time is recent. */
export function hasFreshStepUp(stepUp: boolean, authTimeSeconds: number, now: Date): boolean {
  if (!stepUp || authTimeSeconds <= 0) return false;
  const age = now.getTime() / 1000 - authTimeSeconds;
  // A little future skew is tolerated like token clocks (30 s).
  return age <= STEP_UP_WINDOW_SECONDS && age >= -30;
}

/** Start of the UTC calendar day of `now` (per-day caps reset at 00:00Z). */
export function utcDayStart(now: Date): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
}

/** True when the grant's scopes include `required` (a superset is accepted, spec 5.1). */
export function hasScope(scopes: readonly string[], required: string): boolean {
  return scopes.includes(required);
}
