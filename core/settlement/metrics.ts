import { Counter, Gauge, Histogram } from "prom-client";
import { coreRegistry } from "../observability/metrics.js";
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

export const settlementNoGas = new Counter({
  name: "vaultgate_settlement_no_gas_total",
  help: "Times a payment stayed pending, or a send was refused, because the hot wallet had too little ETH for gas",
  labelNames: ["chain"] as const,
  registers: [coreRegistry],
});

const stores = new Set<SettlementStore>();

/** Adds a core's settlement queue to the scrape; the returned function removes it. */
export function registerSettlementMetrics(store: SettlementStore): () => void {
  stores.add(store);
  return () => void stores.delete(store);
}

new Gauge({
  name: "vaultgate_settlement_payments_open",
  help: "Payments not yet settled, by chain and status (pending, submitted)",
  labelNames: ["chain", "status"] as const,
  registers: [coreRegistry],
  async collect() {
    this.reset();
    for (const store of stores) {
      const counts = await store.openCounts().catch(() => []);
      for (const c of counts) this.inc({ chain: c.chain, status: c.status }, c.count);
      break; // every core of a deployment reads the same table
    }
  },
});
