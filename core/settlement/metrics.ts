import { Counter, Gauge, Histogram } from "prom-client";
import { coreRegistry, withTimeout } from "../observability/metrics.js";
import type { SettlementStore } from "./store.js";

/** Settlement's metrics, in core's registry (core/observability/metrics.ts). */

export const settlementTransitions = new Counter({
  name: "vaultgate_settlement_payments_total",
  help: "Payment lifecycle changes by chain and the status entered (submitted, completed, failed; back to submitted after a reorg)",
  labelNames: ["chain", "status"] as const,
  registers: [coreRegistry],
});

export const settlementAcceptToCompleted = new Histogram({
  name: "vaultgate_settlement_accept_to_completed_seconds",
  help: "Seconds from a payment's acceptance to its transfer being deep enough to count as completed",
  labelNames: ["chain"] as const,
  buckets: [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600],
  registers: [coreRegistry],
});

export const hotWalletBalance = new Gauge({
  name: "vaultgate_settlement_hot_wallet_balance_usdc",
  help: "The hot wallet's USDC balance per chain, as last read from the chain",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

export const hotWalletGas = new Gauge({
  name: "vaultgate_settlement_hot_wallet_gas_eth",
  help: "The hot wallet's ETH for gas per chain, as last read from the chain: without it nothing is sent or cancelled",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

export const settlementRpcErrors = new Counter({
  name: "vaultgate_settlement_rpc_errors_total",
  help: "JSON-RPC calls to a chain's node that failed or timed out, by chain and method",
  labelNames: ["chain", "method"] as const,
  registers: [coreRegistry],
});

export const settlementUnderfunded = new Counter({
  name: "vaultgate_settlement_underfunded_total",
  help: "Times a payment stayed pending because the hot wallet could not cover it",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

export const settlementFeeOverCap = new Counter({
  name: "vaultgate_settlement_fee_over_cap_total",
  help: "Times a transfer, fee bump or cancellation was left unsigned because its fee per gas would pass CHAIN_<NAME>_MAX_FEE_GWEI",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

export const settlementNoGas = new Counter({
  name: "vaultgate_settlement_no_gas_total",
  help: "Times a payment stayed pending, or a send was refused, because the hot wallet had too little ETH for gas",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

export const settlementHeld = new Counter({
  name: "vaultgate_settlement_held_total",
  help: "Times a payment stayed unsigned because its user's account is not active",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

export interface SettlementMetricsSource {
  store: SettlementStore;
  clock: () => Date;
  /** The chains on the evm rail (each shows an overdue figure, 0 when none). */
  chains: () => string[];
}

const sources = new Set<SettlementMetricsSource>();

/** Adds a core's settlement queue to the scrape; the returned function removes it. */
export function registerSettlementMetrics(source: SettlementMetricsSource): () => void {
  sources.add(source);
  return () => void sources.delete(source);
}

/** Longest the scrape waits for the overdue query; a slower database leaves the last value. */
const OVERDUE_QUERY_TIMEOUT_MS = 1000;

new Gauge({
  name: "vaultgate_settlement_overdue_seconds",
  help: "Seconds the chain's longest-overdue payment has been open past its expiry (0 = none): a signed one waits for gas to be cancelled, holding back every later nonce",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
  async collect() {
    const worst = new Map<string, number>();
    let answered = false;
    for (const s of sources) {
      const now = s.clock();
      const rows = await withTimeout(s.store.oldestOverdue(now), OVERDUE_QUERY_TIMEOUT_MS).catch(() => undefined);
      if (!rows) continue;
      answered = true;
      for (const c of s.chains()) worst.set(c, worst.get(c) ?? 0);
      for (const r of rows) worst.set(r.chain, Math.max(worst.get(r.chain) ?? 0, Math.floor((now.getTime() - r.expiresAt.getTime()) / 1000)));
    }
    if (!answered) return;
    this.reset();
    for (const [chain, seconds] of worst) this.set({ chain }, seconds);
  },
});

new Gauge({
  name: "vaultgate_settlement_payments_open",
  help: "Payments not yet settled, by chain and status (pending, submitted)",
  labelNames: ["chain", "status"] as const,
  registers: [coreRegistry],
  async collect() {
    this.reset();
    for (const { store } of sources) {
      const counts = await store.openCounts().catch(() => []);
      for (const c of counts) this.inc({ chain: c.chain, status: c.status }, c.count);
      break; // every core of a deployment reads the same table
    }
  },
});
