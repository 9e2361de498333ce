import { randomUUID } from "node:crypto";
import pino from "pino";
import type { Db } from "../../core/db/knex.js";
import type { EvmRail } from "../../core/settlement/evm-rail.js";
import type { SettlementStore } from "../../core/settlement/store.js";
import { createSettlementWorker, type SettlementWorker, type SettlementWorkerOptions } from "../../core/settlement/worker.js";

/** A settlement worker over one rail that waits for nothing: a test moves it with runOnce. */
export function railWorker(store: SettlementStore, rail: EvmRail, over: Partial<SettlementWorkerOptions> = {}): SettlementWorker {
  return createSettlementWorker({
    store,
    rails: () => new Map([[rail.settings.chain, rail]]),
    clock: () => new Date(),
    logger: pino({ level: "silent" }),
    pollMs: 0,
    recheckMs: 0,
    underfundedRetryMs: 0,
    ...over,
  });
}

/** A payment put straight into the settlement queue (no vault, no ledger): the worker's own tests. */
export async function queuePayment(
  db: Db,
  store: SettlementStore,
  p: { chain: string; wallet: string; to: string; amountCents: number; at?: Date; expiresAt?: Date },
): Promise<string> {
  const paymentId = randomUUID();
  const at = p.at ?? new Date();
  await store.insert(db, {
    paymentId,
    chain: p.chain,
    rail: "evm",
    wallet: p.wallet.toLowerCase(),
    recipient: p.to,
    amountCents: p.amountCents,
    currency: "USD",
    at,
    expiresAt: p.expiresAt ?? new Date(at.getTime() + 3600_000),
  });
  return paymentId;
}
