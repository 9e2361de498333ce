import { STEP_UP_WINDOW_SECONDS } from "../identity/sessions.js";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";

export { CHAINS } from "../../lib/vocabulary.js";
/** Budget purposes. */
export const PURPOSES = ["ap", "treasury", "trip", "market-research", "payroll", "multi-chain-concierge", "custom"] as const;
/** Amount fields are integers 0 to 2^53-1. */
export const MAX_AMOUNT = Number.MAX_SAFE_INTEGER;
export interface Policy {
  /** `closed`: the budget was closed and its policy frozen; like a draft, it passes no payment. */
  status: "draft" | "active" | "closed";
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
export type Rule = "policy_inactive" | "time_window_end" | "chain_allowlist" | "per_tx_cap" | "per_day_cap" | "lifetime_cap" | "balance" | "step_up_amount";

export type Evaluation = { decision: "accept" } | { decision: "step_up"; rule: "step_up_amount" } | { decision: "deny"; rule: Exclude<Rule, "step_up_amount"> };

/**
 * Every rule a payment breaks, in a fixed order; step-up comes last so a payment sent for
 * approval could actually run once approved. A draft policy is still checked rule by rule so
 * an agent learns everything at once. Pure: no I/O.
 */
export function brokenRules(policy: Policy | undefined, usage: VaultUsage, ask: PaymentAsk, now: Date, options: { stepUpApproved?: boolean } = {}): Rule[] {
  if (!policy) return ["policy_inactive"];
  const broken: Rule[] = [];
  if (policy.status !== "active") broken.push("policy_inactive");
  // The window is open up to and excluding its end instant.
  if (policy.timeWindowEnd && now.getTime() >= policy.timeWindowEnd.getTime()) broken.push("time_window_end");
  if (!policy.chainAllowlist.includes(ask.chain)) broken.push("chain_allowlist");
  if (policy.amountCapCentsPerTx !== null && ask.amountCents > policy.amountCapCentsPerTx) broken.push("per_tx_cap");
  if (policy.amountCapCentsPerDay !== null && usage.spentTodayCents + ask.amountCents > policy.amountCapCentsPerDay) broken.push("per_day_cap");
  if (policy.amountCapCentsLifetime !== null && usage.spentLifetimeCents + ask.amountCents > policy.amountCapCentsLifetime) broken.push("lifetime_cap");
  if (ask.amountCents > usage.balanceCents) broken.push("balance");
  if (!options.stepUpApproved && policy.stepUpAmountCents !== null && ask.amountCents > policy.stepUpAmountCents) broken.push("step_up_amount");
  return broken;
}

/** The decision from the broken rules: the first refusing rule decides; else a step-up; else accept. */
export function decide(broken: readonly Rule[]): Evaluation {
  const deny = broken.find((r): r is Exclude<Rule, "step_up_amount"> => r !== "step_up_amount");
  if (deny) return { decision: "deny", rule: deny };
  if (broken.includes("step_up_amount")) return { decision: "step_up", rule: "step_up_amount" };
  return { decision: "accept" };
}

/** Evaluates a payment against a vault's policy: `decide(brokenRules(...))`. */
export function evaluatePayment(
  policy: Policy | undefined,
  usage: VaultUsage,
  ask: PaymentAsk,
  now: Date,
  options: { stepUpApproved?: boolean } = {},
): Evaluation {
  return decide(brokenRules(policy, usage, ask, now, options));
}

/** Stable words for each rule, for agents and people; never an amount or a remaining allowance. */
export const RULE_MESSAGES: Readonly<Record<Rule, string>> = {
  policy_inactive: "the vault's spending policy is not active",
  time_window_end: "the policy's time window has ended",
  chain_allowlist: "the chain is not in the policy's allowlist",
  per_tx_cap: "the amount is over the per-transaction cap",
  per_day_cap: "the amount would go over today's cap",
  lifetime_cap: "the amount would go over the lifetime cap",
  balance: "the vault's balance is below the amount",
  step_up_amount: "the amount needs the owner's step-up approval",
};

/** A grant counts as stepped up when acr = step-up and auth_time is recent. */
export function hasFreshStepUp(stepUp: boolean, authTimeSeconds: number, now: Date): boolean {
  if (!stepUp || authTimeSeconds <= 0) return false;
  const age = now.getTime() / 1000 - authTimeSeconds;
  // A little future skew is tolerated like token clocks.
  return age <= STEP_UP_WINDOW_SECONDS && age >= -CLOCK_SKEW_SECONDS;
}

/** At most this many payments awaiting approval and draft budgets, together, per vault. */
export const MAX_AWAITING_OWNER = 50;
/** The limit name a refusal over that bound carries. */
export const AWAITING_LIMIT = "pending_approvals";
export const AWAITING_WORDS = `the vault already has ${MAX_AWAITING_OWNER} payments and draft budgets waiting for its owner`;
export const AWAITING_MESSAGE = `${AWAITING_LIMIT}: ${AWAITING_WORDS}`;

/** Start of the UTC calendar day of `now` (per-day caps reset at 00:00Z). */
export function utcDayStart(now: Date): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
}

/** True when the grant's scopes include `required` (a superset is accepted). */
export function hasScope(scopes: readonly string[], required: string): boolean {
  return scopes.includes(required);
}
