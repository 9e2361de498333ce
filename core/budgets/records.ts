import type { Knex } from "knex";
import { textArray } from "../db/rows.js";
import type { Policy } from "./policy.js";

// The rows the budgets room reads and writes, and their mapping from SQL.

export type Conn = Knex | Knex.Transaction;

export type BudgetStatusName = "provisioning" | "failed" | "cleanup_pending" | "draft" | "active" | "declined" | "closed";
/** The statuses of a budget whose saga finished: it has a vault, an agent principal and a policy. */
export const PROVISIONED: readonly BudgetStatusName[] = ["draft", "active", "declined", "closed"];
export type StepName = "vault" | "agent_principal" | "policy";
export type StepState = "pending" | "done" | "failed" | "compensated" | "compensation_failed";

export interface BudgetParams {
  purpose: string;
  displayName: string;
  amountCapCentsPerTx: number | null;
  amountCapCentsPerDay: number | null;
  amountCapCentsLifetime: number | null;
  stepUpAmountCents: number | null;
  chainAllowlist: string[];
  timeWindowEnd: string | null;
}

export interface BudgetRecord {
  id: string;
  parentVaultId: string;
  userId: string;
  parentAgentId: string | null;
  grantId: string;
  idempotencyKey: string;
  paramsHash: string;
  params: BudgetParams;
  agentPrincipalId: string;
  vaultId: string;
  status: BudgetStatusName;
  policyVersion: number;
  attempt: number;
  steps: { name: StepName; state: StepState }[];
  remaining: string[];
  createdAt: Date;
  updatedAt: Date;
  /** When CloseBudget closed it; null before. */
  closedAt: Date | null;
}

export interface VaultRecord {
  id: string;
  ownerUserId: string;
  parentVaultId: string | null;
  balanceCents: number;
  currency: string;
}

export type PaymentStatusName = "pending_step_up" | "approved" | "completed" | "declined";

export interface PaymentRecord {
  id: string;
  vaultId: string;
  userId: string;
  agentPrincipalId: string | null;
  grantId: string;
  idempotencyKey: string;
  paramsHash: string;
  address: string;
  chain: string;
  token: string;
  amountCents: number;
  currency: string;
  status: PaymentStatusName;
  createdAt: Date;
}

/** The vault columns toVault reads (named, not v.*: the statements reading them are prepared). */
export const VAULT_COLUMNS = `v.id, v.owner_user_id, v.parent_vault_id, v.balance_cents, v.currency`;

/** The UTC calendar day of an instant, as a SQL date literal (YYYY-MM-DD). */
export const utcDay = (at: Date) => at.toISOString().slice(0, 10);
export const date = (v: unknown) => (v instanceof Date ? v : new Date(String(v)));
const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

export function toBudget(r: Record<string, unknown>): BudgetRecord {
  return {
    id: String(r.id),
    parentVaultId: String(r.parent_vault_id),
    userId: String(r.user_id),
    parentAgentId: r.parent_agent_id ? String(r.parent_agent_id) : null,
    grantId: String(r.grant_id),
    idempotencyKey: String(r.idempotency_key),
    paramsHash: String(r.params_hash),
    params: (typeof r.params === "string" ? JSON.parse(r.params) : r.params) as BudgetParams,
    agentPrincipalId: String(r.agent_principal_id),
    vaultId: String(r.vault_id),
    status: r.status as BudgetStatusName,
    policyVersion: Number(r.policy_version),
    attempt: Number(r.attempt),
    steps: (typeof r.steps === "string" ? JSON.parse(r.steps) : r.steps) as BudgetRecord["steps"],
    remaining: textArray(r.remaining),
    createdAt: date(r.created_at),
    updatedAt: date(r.updated_at),
    closedAt: r.closed_at ? date(r.closed_at) : null,
  };
}

export function toVault(r: Record<string, unknown>): VaultRecord {
  return {
    id: String(r.id),
    ownerUserId: String(r.owner_user_id),
    parentVaultId: r.parent_vault_id ? String(r.parent_vault_id) : null,
    balanceCents: Number(r.balance_cents),
    currency: String(r.currency),
  };
}

export function toPolicy(r: Record<string, unknown>): Policy {
  return {
    status: r.status as Policy["status"],
    amountCapCentsPerTx: num(r.amount_cap_cents_per_tx),
    amountCapCentsPerDay: num(r.amount_cap_cents_per_day),
    amountCapCentsLifetime: num(r.amount_cap_cents_lifetime),
    stepUpAmountCents: num(r.step_up_amount_cents),
    chainAllowlist: textArray(r.chain_allowlist),
    timeWindowEnd: r.time_window_end ? date(r.time_window_end) : null,
  };
}

export function toPayment(r: Record<string, unknown>): PaymentRecord {
  return {
    id: String(r.id),
    vaultId: String(r.vault_id),
    userId: String(r.user_id),
    agentPrincipalId: r.agent_principal_id ? String(r.agent_principal_id) : null,
    grantId: String(r.grant_id),
    idempotencyKey: String(r.idempotency_key),
    paramsHash: String(r.params_hash),
    address: String(r.address),
    chain: String(r.chain),
    token: String(r.token),
    amountCents: Number(r.amount_cents),
    currency: String(r.currency),
    status: r.status as PaymentStatusName,
    createdAt: date(r.created_at),
  };
}

/**
 * Today's completed spend from the vault row's running totals (`d`, a SQL date, is the
 * reader's UTC day): a row a day ahead counts both days, for a payment stamped before midnight
 * and decided after; a reader further behind (a clock set back) counts the lifetime, erring to refuse.
 */
export const spentTodaySql = (d: string) =>
  `(CASE WHEN v.spent_day IS NULL OR v.spent_day < ${d} THEN 0 WHEN v.spent_day = ${d} THEN v.spent_day_cents
         WHEN v.spent_day = ${d} + 1 THEN v.spent_day_cents + v.spent_prev_day_cents ELSE v.spent_lifetime_cents END)`;

export type PaymentContext = ReturnType<typeof toPaymentContext>;

export function toPaymentContext(r: Record<string, unknown>) {
  return {
    vault: toVault(r),
    policy: r.p_vault_id ? toPolicy({ ...r, status: r.p_status }) : undefined,
    usage: { today: Number(r.spent_today), lifetime: Number(r.spent_lifetime) },
  };
}
