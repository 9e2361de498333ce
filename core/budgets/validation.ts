import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { lengthBetween, nameProblem } from "../../lib/text.js";
import type { EvmRail } from "../settlement/evm-rail.js";
import { evmAddressProblem, isEvmChain, tokenSupported } from "../settlement/rules.js";
import { CHAINS, MAX_AMOUNT, PURPOSES } from "./policy.js";
import type { BudgetParams } from "./records.js";
import { isCurrencyCode } from "../../lib/vocabulary.js";

/** The last millisecond of the year 9999. */
const LATEST_TIME = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** A budget's fields as core receives them (proto init shape, already typed). */
export interface BudgetInput {
  purpose: string;
  displayName: string;
  amountCapCentsPerTx?: number;
  amountCapCentsPerDay?: number;
  amountCapCentsLifetime?: number;
  stepUpAmountCents?: number;
  chainAllowlist: string[];
  timeWindowEnd?: Date;
  idempotencyKey: string;
}

/**
 * Rules that any caller of core must meet (the gateway checks the wire schema
 * first); a time_window_end in the past is invalid. Lengths are characters
 * (code points), as at the gateway.
 */
export function checkBudgetInput(input: BudgetInput): BudgetParams {
  if (!(PURPOSES as readonly string[]).includes(input.purpose)) fail(Reason.INVALID_REQUEST, `purpose must be one of ${PURPOSES.join(", ")}`);
  checkDisplayName(input.displayName);
  checkKey(input.idempotencyKey);
  const amounts = {
    amount_cap_cents_per_tx: input.amountCapCentsPerTx,
    amount_cap_cents_per_day: input.amountCapCentsPerDay,
    amount_cap_cents_lifetime: input.amountCapCentsLifetime,
    step_up_amount_cents: input.stepUpAmountCents,
  };
  for (const [name, value] of Object.entries(amounts)) {
    if (value !== undefined && !isAmount(value)) fail(Reason.INVALID_REQUEST, `${name} must be an integer from 0 to ${MAX_AMOUNT}`);
  }
  // A Timestamp's range, as the gateway's date-time rule: a later one is no Date, or one PostgreSQL cannot read back.
  if (input.timeWindowEnd && !(input.timeWindowEnd.getTime() <= LATEST_TIME))
    fail(Reason.INVALID_REQUEST, "time_window_end must be at most 9999-12-31T23:59:59.999Z");
  if (input.chainAllowlist.length === 0) fail(Reason.INVALID_REQUEST, "chain_allowlist needs at least one chain");
  const unknown = input.chainAllowlist.filter((c) => !(CHAINS as readonly string[]).includes(c));
  if (unknown.length > 0) fail(Reason.INVALID_REQUEST, `chain_allowlist items must be among ${CHAINS.join(", ")}`);
  return {
    purpose: input.purpose,
    displayName: input.displayName,
    amountCapCentsPerTx: input.amountCapCentsPerTx ?? null,
    amountCapCentsPerDay: input.amountCapCentsPerDay ?? null,
    amountCapCentsLifetime: input.amountCapCentsLifetime ?? null,
    stepUpAmountCents: input.stepUpAmountCents ?? null,
    // A set: order and repeats do not change the policy, so they do not change identity.
    chainAllowlist: [...new Set(input.chainAllowlist)].sort(),
    timeWindowEnd: input.timeWindowEnd ? input.timeWindowEnd.toISOString() : null,
  };
}

/** A budget's name is shown to its owner, mailed and printed: the text rules of a client's name, and not blank. */
function checkDisplayName(name: string): void {
  if (!lengthBetween(name, 1, 100)) fail(Reason.INVALID_REQUEST, "display_name must be 1 to 100 characters");
  const problem = nameProblem(name);
  if (problem) fail(Reason.INVALID_REQUEST, `display_name ${problem}`);
  if (name.trim() === "") fail(Reason.INVALID_REQUEST, "display_name must not be blank");
}

/** A new budget's window must still be open; a replay of a finished one answers whatever its time. */
export function checkWindowOpen(params: Pick<BudgetParams, "timeWindowEnd">, now: Date): void {
  if (params.timeWindowEnd && Date.parse(params.timeWindowEnd) <= now.getTime()) fail(Reason.INVALID_REQUEST, "time_window_end must be in the future");
}

const VISIBLE_ASCII = /^[\x21-\x7e]+$/;

export interface PaymentInput {
  address: string;
  chain: string;
  token: string;
  amountCents: number;
  currency: string;
  idempotencyKey: string;
}

/** A payment's arguments; all are required. */
export function checkPaymentInput(p: PaymentInput): PaymentInput {
  if (!lengthBetween(p.address, 1, 256)) fail(Reason.INVALID_REQUEST, "counterparty.address must be 1 to 256 characters");
  // Addresses and token symbols are ASCII on every chain; anything else (a bidi control,
  // a look-alike letter) could show the owner approving a payment another payee.
  if (!VISIBLE_ASCII.test(p.address)) fail(Reason.INVALID_REQUEST, "counterparty.address must be printable ASCII without spaces");
  if (!(CHAINS as readonly string[]).includes(p.chain)) fail(Reason.INVALID_REQUEST, `counterparty.chain must be one of ${CHAINS.join(", ")}`);
  // An EVM chain takes an EVM address whichever rail settles it, so what passes in development passes in production.
  const problem = isEvmChain(p.chain) ? evmAddressProblem(p.address) : undefined;
  if (problem) fail(Reason.INVALID_REQUEST, `counterparty.address ${problem} on chain ${p.chain}`);
  if (!lengthBetween(p.token, 1, 64)) fail(Reason.INVALID_REQUEST, "counterparty.token must be 1 to 64 characters");
  if (!VISIBLE_ASCII.test(p.token)) fail(Reason.INVALID_REQUEST, "counterparty.token must be printable ASCII without spaces");
  if (!isAmount(p.amountCents) || p.amountCents < 1) fail(Reason.INVALID_REQUEST, `amount_cents must be an integer from 1 to ${MAX_AMOUNT}`);
  if (!isCurrencyCode(p.currency)) fail(Reason.INVALID_REQUEST, "currency must be an ISO 4217 code");
  checkKey(p.idempotencyKey);
  return p;
}

/** FundBudget's arguments: an amount of 1 to 2^53-1 cents and an idempotency key. */
export function checkFundInput(amountCents: bigint, idempotencyKey: string): number {
  if (amountCents < 1n || amountCents > BigInt(MAX_AMOUNT)) fail(Reason.INVALID_REQUEST, `amount_cents must be an integer from 1 to ${MAX_AMOUNT}`);
  checkKey(idempotencyKey);
  return Number(amountCents);
}

function checkKey(key: string) {
  if (!lengthBetween(key, 8, 128)) fail(Reason.INVALID_REQUEST, "idempotency_key must be 8 to 128 characters");
}

function isAmount(v: number): boolean {
  return Number.isSafeInteger(v) && v >= 0 && v <= MAX_AMOUNT;
}

/** An optional proto amount as a number; out-of-range values stay out of range so validation names the field. */
export function optNumber(v: bigint | undefined): number | undefined {
  if (v === undefined) return undefined;
  return v > BigInt(Number.MAX_SAFE_INTEGER) || v < 0n ? -1 : Number(v);
}

/** A payment request's fields, checked. */
export function paymentInput(
  p: { counterparty?: { address: string; chain: string; token: string }; amountCents: bigint; currency: string; idempotencyKey: string } | undefined,
) {
  if (!p?.counterparty) return fail(Reason.INVALID_REQUEST, "counterparty is required");
  return checkPaymentInput({
    address: p.counterparty.address,
    chain: p.counterparty.chain,
    token: p.counterparty.token,
    amountCents: optNumber(p.amountCents)!,
    currency: p.currency,
    idempotencyKey: p.idempotencyKey,
  });
}

/**
 * What the evm rail takes, checked alike by initiate and simulate: USDC in dollars (1 cent = 10,000
 * base units) to a third party. The sandbox rail (no `rail`) adds nothing.
 */
export function checkRailInput(rail: EvmRail | undefined, input: PaymentInput): void {
  if (!rail) return;
  if (!tokenSupported("evm", input.token)) fail(Reason.TOKEN_UNSUPPORTED, `counterparty.token must be USDC on chain ${input.chain}`);
  if (input.currency !== "USD") fail(Reason.INVALID_REQUEST, `currency must be USD on chain ${input.chain} (it settles in USDC)`);
  // Paid to itself, a transfer moves nothing on chain while the books would say it left the hot wallet.
  if (input.address.toLowerCase() === rail.wallet) fail(Reason.INVALID_REQUEST, `counterparty.address is the hot wallet chain ${input.chain} pays from`);
  // A retired wallet is the platform's own too: books that read it as a move between our wallets would never match.
  if (rail.settings.retiredWallets?.includes(input.address.toLowerCase())) {
    fail(Reason.INVALID_REQUEST, `counterparty.address is a retired hot wallet of chain ${input.chain}`);
  }
  // USDC held by its own contract can never be sent on again: the payment would be lost, not paid.
  if (input.address.toLowerCase() === rail.settings.usdc.toLowerCase()) {
    fail(Reason.INVALID_REQUEST, `counterparty.address is the USDC contract of chain ${input.chain}, which never sends it on`);
  }
}

/** The smallest payment a rail takes, in cents: each evm transfer costs the platform gas; the sandbox takes a cent. */
export const minimumCents = (rail: EvmRail | undefined): number => rail?.settings.minAmountCents ?? 1;

export function refuseBelowMinimum(rail: EvmRail | undefined, input: PaymentInput): never {
  return fail(Reason.INVALID_REQUEST, `amount_cents must be at least ${minimumCents(rail)} on chain ${input.chain}`);
}
