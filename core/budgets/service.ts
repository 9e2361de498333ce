import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { CursorCodec } from "../paging.js";
import type { AgentTokenClaims } from "../grants/access-token.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { fundBudget, fundVault } from "./funding.js";
import { activateBudget, closeBudget, createBudget, declineBudget, listStrandedFunds, sweepBudget } from "./lifecycle.js";
import { getMoneyView } from "./money-view.js";
import { approvePayment, declinePayment, getPayment, initiatePayment, listPendingApprovals, simulatePayment } from "./payments.js";
import type { SettlementPort } from "../settlement/settlement.js";
import { getBalance, listGrantAudit } from "./reads.js";
import { reap } from "./reaper.js";
import { cancelInFlight, endMarkedBudgets } from "./endings.js";
import type { InFlight } from "../grants/stores/budget-grants.js";
import type { BudgetsFaults } from "./saga.js";
import type { BudgetsStore } from "./store.js";

export type { BudgetsFaults };

export interface BudgetsServiceDeps {
  db: Db;
  store: BudgetsStore;
  audit: AuditStore;
  rateLimits: RateLimitStore;
  cursors: CursorCodec;
  clock: () => Date;
  /** Verifies agent access tokens (signature, issuer, audience, type, lifetime); grant state is read here. */
  verifier: { verify(token: string): Promise<AgentTokenClaims | undefined> };
  /** Turns the dashboard's web session token into the signed-in owner. */
  sessions: SessionVerifier;
  /** `{app_url}`, where owners approve step-ups. */
  appUrl: string;
  /** Which rail settles each chain, and the settlement rows (core/settlement). */
  settlement: SettlementPort;
  /** Provisioning starts per parent vault per minute (default 10). */
  provisioningLimitPerMinute: number;
  /** A saga untouched this long is abandoned and reaped (default 300 s). */
  staleProvisioningSeconds?: number;
  faults?: BudgetsFaults;
  /** Test-only seam, the same one the audit store honours (AuditStoreOptions.appendFault). */
  auditFault?: () => Error | undefined;
  logger?: Logger;
}

export interface BudgetsServiceImpl extends ServiceImpl<typeof BudgetsService> {
  /** One reaper pass: finishes partial cleanups and abandoned sagas (returns how many), and ends marked budgets. */
  reap(): Promise<number>;
  /** What revoked grants left open, for the grants service (core.ts wires it). */
  inFlight: InFlight;
}

/** Assembles BudgetsService: each RPC is a handler of its own module, given the deps it needs. */
export function createBudgetsService(deps: BudgetsServiceDeps): BudgetsServiceImpl {
  const { store, ...rest } = deps;
  const d = {
    ...rest,
    ...store,
    faults: deps.faults ?? {},
    staleMs: (deps.staleProvisioningSeconds ?? 300) * 1000,
  };
  return {
    createBudget: (req, ctx) => createBudget(d, req, ctx),
    activateBudget: (req, ctx) => activateBudget(d, req, ctx),
    declineBudget: (req, ctx) => declineBudget(d, req, ctx),
    closeBudget: (req, ctx) => closeBudget(d, req, ctx),
    sweepBudget: (req, ctx) => sweepBudget(d, req, ctx),
    listStrandedFunds: (req) => listStrandedFunds(d, req),
    initiatePayment: (req, ctx) => initiatePayment(d, req, ctx),
    simulatePayment: (req, ctx) => simulatePayment(d, req, ctx),
    getPayment: (req, ctx) => getPayment(d, req, ctx),
    approvePayment: (req, ctx) => approvePayment(d, req, ctx),
    declinePayment: (req, ctx) => declinePayment(d, req, ctx),
    listPendingApprovals: (req) => listPendingApprovals(d, req),
    getBalance: (req, ctx) => getBalance(d, req, ctx),
    listGrantAudit: (req, ctx) => listGrantAudit(d, req, ctx),
    fundVault: (req, ctx) => fundVault(d, req, ctx),
    fundBudget: (req, ctx) => fundBudget(d, req, ctx),
    getMoneyView: (req) => getMoneyView(d, req),
    reapProvisioning: async () => ({ cleaned: await reap(d) }),
    reap: () => reap(d),
    inFlight: {
      cancel: (trx, revoked, at) => cancelInFlight(d, trx, revoked, at),
      endDrafts: (ids, actor, ctx) => endMarkedBudgets(d, ids, actor, ctx),
    },
  };
}
