import { randomUUID } from "node:crypto";
import pino from "pino";
import type { Db } from "../../core/db/knex.js";
import type { EvmRail } from "../../core/settlement/evm-rail.js";
import { createSettlementStore, type SettlementStore } from "../../core/settlement/store.js";
import { createSettlementWorker, type SettlementWorker, type SettlementWorkerOptions } from "../../core/settlement/worker.js";
import type { Hex } from "viem";
import type { Anvil } from "./anvil.js";
import { ownDatabase, requirePostgres } from "./db.js";
import { startAnvilWithUsdc } from "./evm-rail.js";

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
  { db, store }: OwnQueue,
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

export interface OwnQueue {
  readonly db: Db;
  readonly store: SettlementStore;
}

/**
 * Inside a describe: a database of the suite's own with a settlement store, made before its tests
 * and dropped after them; payments queued there have no ledger entries for other files' checks to trip on.
 */
export function ownQueueDatabase(): OwnQueue {
  let own: Awaited<ReturnType<typeof ownDatabase>> | undefined;
  let store: SettlementStore | undefined;
  before(async () => {
    own = await ownDatabase();
    store = createSettlementStore(own.db);
  });
  after(async () => {
    await own?.drop();
  });
  return {
    get db() {
      return own!.db;
    },
    get store() {
      return store!;
    },
  };
}

/**
 * Inside a describe: a local anvil with USDC and a queue database of the suite's own; workers pushed
 * onto `workers` are stopped, then the node, after the suite. `postgresOnly` (why): every test of the
 * suite needs PostgreSQL, so on the embedded database all are skipped (why: in each one's title) and nothing is started.
 */
export function chainQueueSuite(options: { postgresOnly?: string } = {}) {
  const { postgresOnly } = options;
  // First of the suite's hooks: skipped there, mocha runs none of the later before-all hooks.
  if (postgresOnly !== undefined)
    before(function () {
      requirePostgres(this, postgresOnly);
    });
  const queue = ownQueueDatabase();
  const workers: SettlementWorker[] = [];
  let chain: { anvil: Anvil; usdc: Hex } | undefined;
  before(async () => {
    chain = await startAnvilWithUsdc();
  });
  after(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await chain?.anvil.stop();
  });
  return {
    queue,
    workers,
    get anvil() {
      return chain!.anvil;
    },
    get usdc() {
      return chain!.usdc;
    },
  };
}
