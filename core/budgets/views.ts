import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { BudgetStatus, type BudgetLimitsSchema, type BudgetSchema } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus, type PaymentSchema } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import { paymentLinkPath } from "../../lib/app-paths.js";
import type { BudgetRecord, PaymentRecord } from "./records.js";
import type { SettlementPayment } from "../settlement/records.js";

/** A vault's spending policy as the owner reviews it (budget creation, activation, the money view). */
export interface LimitsSource {
  purpose: string;
  amountCapCentsPerTx: number | null;
  amountCapCentsPerDay: number | null;
  amountCapCentsLifetime: number | null;
  stepUpAmountCents: number | null;
  chainAllowlist: string[];
  timeWindowEnd: Date | string | null;
}

export function limitsView(p: LimitsSource, currency: string): MessageInitShape<typeof BudgetLimitsSchema> {
  const cents = (v: number | null) => (v === null ? undefined : BigInt(v));
  return {
    purpose: p.purpose,
    amountCapCentsPerTx: cents(p.amountCapCentsPerTx),
    amountCapCentsPerDay: cents(p.amountCapCentsPerDay),
    amountCapCentsLifetime: cents(p.amountCapCentsLifetime),
    stepUpAmountCents: cents(p.stepUpAmountCents),
    chainAllowlist: p.chainAllowlist,
    timeWindowEnd: p.timeWindowEnd ? timestampFromDate(new Date(p.timeWindowEnd)) : undefined,
    currency,
  };
}

/**
 * Stored budget statuses as the proto names them. A status this code does not know (a
 * later migration's) has no entry: each caller decides what it reads as.
 */
export const BUDGET_STATUS: Readonly<Record<string, BudgetStatus>> = {
  draft: BudgetStatus.DRAFT,
  active: BudgetStatus.ACTIVE,
  declined: BudgetStatus.DECLINED,
  closed: BudgetStatus.CLOSED,
};

/** Stored payment statuses as the proto names them. */
export const PAYMENT_STATUS: Readonly<Record<string, PaymentStatus>> = {
  pending_step_up: PaymentStatus.PENDING_STEP_UP,
  approved: PaymentStatus.APPROVED,
  completed: PaymentStatus.COMPLETED,
  declined: PaymentStatus.DECLINED,
};

/** An accepted payment's settlement status as the proto names it. */
const SETTLEMENT_STATUS: Readonly<Record<SettlementPayment["status"], PaymentStatus>> = {
  pending: PaymentStatus.PENDING,
  submitted: PaymentStatus.SUBMITTED,
  completed: PaymentStatus.COMPLETED,
  failed: PaymentStatus.FAILED,
};

export function budgetView(b: BudgetRecord, currency = ""): MessageInitShape<typeof BudgetSchema> {
  const p = b.params;
  return {
    budgetId: b.id,
    agentPrincipalId: b.agentPrincipalId,
    vaultId: b.vaultId,
    policyVersion: BigInt(b.policyVersion),
    status: BUDGET_STATUS[b.status] ?? BudgetStatus.DRAFT,
    createdAt: timestampFromDate(b.createdAt),
    displayName: b.params.displayName,
    limits: limitsView(p, currency),
  };
}

/** Where the owner reviews a payment waiting for step-up approval: `{app_url}/dashboard/agents[/<agent>]?payment=<id>`. */
export function stepUpUrl(appUrl: string, p: { id: string; agentPrincipalId: string | null }): string {
  return `${appUrl}${paymentLinkPath(p.id, p.agentPrincipalId)}`;
}

/**
 * A payment; an accepted one (stored `completed`) shows its settlement's status, hash and
 * depth. One accepted before settlement existed has no settlement row: it was completed.
 */
export function paymentView(appUrl: string, p: PaymentRecord, s?: SettlementPayment): MessageInitShape<typeof PaymentSchema> {
  const settled = p.status === "completed" ? s : undefined;
  const status = settled ? SETTLEMENT_STATUS[settled.status] : PAYMENT_STATUS[p.status];
  return {
    paymentId: p.id,
    vaultId: p.vaultId,
    status,
    amountCents: BigInt(p.amountCents),
    currency: p.currency,
    counterparty: { address: p.address, chain: p.chain, token: p.token },
    createdAt: timestampFromDate(p.createdAt),
    stepUpUrl: p.status === "completed" || p.status === "declined" ? "" : stepUpUrl(appUrl, p),
    agentPrincipalId: p.agentPrincipalId ?? "",
    txHash: settled?.txHash ?? "",
    confirmations: settled?.confirmations ?? 0,
    failureReason: settled?.failureReason ?? "",
    updatedAt: timestampFromDate(settled?.updatedAt ?? p.createdAt),
  };
}
