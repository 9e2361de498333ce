import { Counter, Gauge, Histogram, Registry } from "prom-client";

/**
 * Values are module-level because group commit, secret checks and audit writes are shared by every
 * core in the process; per-instance state (pool, outbox) is read at scrape time from registered cores.
 */
export const coreRegistry = new Registry();

/** Seconds; from well under a millisecond (in-process hop) to a slow database. */
const RPC_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export const rpcDuration = new Histogram({
  name: "vaultgate_core_rpc_duration_seconds",
  help: "Core RPCs by service, method and gRPC status code, and how long each took (its _count is the request count)",
  labelNames: ["service", "method", "code"] as const,
  buckets: RPC_BUCKETS,
  registers: [coreRegistry],
});

export const groupCommitBatchSize = new Histogram({
  name: "vaultgate_group_commit_batch_size",
  help: "Items per statement of each group-commit batcher (1 = no sharing)",
  labelNames: ["batcher"] as const,
  buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
  registers: [coreRegistry],
});

export const groupCommitQueued = new Gauge({
  name: "vaultgate_group_commit_queued",
  help: "Items waiting for a batch of each group-commit batcher; sustained non-zero means all its batches are busy",
  labelNames: ["batcher"] as const,
  registers: [coreRegistry],
});

export const secretChecksActive = new Gauge({
  name: "vaultgate_secret_checks_active",
  help: "Secret derivations (scrypt) running now",
  registers: [coreRegistry],
});

export const secretChecksQueued = new Gauge({
  name: "vaultgate_secret_checks_queued",
  help: "Secret derivations waiting for a slot, by class of client (known, unknown)",
  labelNames: ["lane"] as const,
  registers: [coreRegistry],
});

export const secretChecksShed = new Counter({
  name: "vaultgate_secret_checks_shed_total",
  help: "Secret checks refused with OVERLOADED because the queue was full or the wait too long",
  registers: [coreRegistry],
});

export const secretChecksAbandoned = new Counter({
  name: "vaultgate_secret_checks_abandoned_total",
  help: "Secret checks never derived because their caller's deadline passed (or the caller left) before or while they waited",
  registers: [coreRegistry],
});

export const secretDerivations = new Counter({
  name: "vaultgate_secret_derivations_total",
  help: "Secret derivations (scrypt) started",
  registers: [coreRegistry],
});

export const auditWriteFailures = new Counter({
  name: "vaultgate_audit_write_failures_total",
  help: "Audit record appends that failed (the action they recorded was refused or rolled back)",
  registers: [coreRegistry],
});

/** What one running core lets the scrape read. */
export interface CoreMetricsSource {
  /** The knex instance whose connection pool is read. */
  db: { client: unknown };
  /** Age in seconds of the oldest due, undelivered webhook event; 0 when none is due. */
  outboxLagSeconds(): Promise<number>;
}

const sources = new Set<CoreMetricsSource>();

/** Adds a core's pool and outbox to the scrape; the returned function removes them (on close). */
export function registerCoreMetrics(source: CoreMetricsSource): () => void {
  sources.add(source);
  return () => void sources.delete(source);
}

interface TarnPool {
  numUsed(): number;
  numFree(): number;
  numPendingAcquires(): number;
  numPendingCreates(): number;
  max: number;
}

const poolOf = (db: { client: unknown }): TarnPool | undefined => (db.client as { pool?: TarnPool }).pool;

/** A gauge whose value is the sum, over the registered cores, of one pool figure. */
function poolGauge(name: string, help: string, read: (p: TarnPool) => number) {
  return new Gauge({
    name,
    help,
    registers: [coreRegistry],
    collect() {
      let sum = 0;
      for (const s of sources) {
        const pool = poolOf(s.db);
        if (pool) sum += read(pool);
      }
      this.set(sum);
    },
  });
}

poolGauge("vaultgate_db_pool_connections_in_use", "Database connections lent to a query or transaction now", (p) => p.numUsed());
poolGauge("vaultgate_db_pool_connections_idle", "Open database connections waiting in the pool", (p) => p.numFree());
poolGauge("vaultgate_db_pool_pending_acquires", "Queries and transactions waiting for a database connection", (p) => p.numPendingAcquires());
poolGauge("vaultgate_db_pool_pending_creates", "Database connections being opened", (p) => p.numPendingCreates());
poolGauge("vaultgate_db_pool_max", "Most connections the pool opens (embedded PGlite: 1)", (p) => p.max);

/** Longest the scrape waits for the outbox query; a slower database leaves the last value. */
const OUTBOX_QUERY_TIMEOUT_MS = 1000;

new Gauge({
  name: "vaultgate_webhook_outbox_lag_seconds",
  help: "Age of the oldest partner webhook event that is due and not yet delivered (0 = none waiting)",
  registers: [coreRegistry],
  async collect() {
    let worst: number | undefined;
    for (const s of sources) {
      const lag = await withTimeout(s.outboxLagSeconds(), OUTBOX_QUERY_TIMEOUT_MS).catch(() => undefined);
      if (lag !== undefined) worst = Math.max(worst ?? 0, lag);
    }
    if (worst !== undefined) this.set(worst);
  },
});

/** `p`, or undefined once `ms` have passed without its answer. */
export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** Concurrent scrapes share one running read per core. */
export function sharedReader(read: () => Promise<number>): () => Promise<number> {
  let running: Promise<number> | undefined;
  return () =>
    (running ??= read().finally(() => {
      running = undefined;
    }));
}

// Both classes show from the first scrape, not only once something queued.
secretChecksQueued.set({ lane: "known" }, 0);
secretChecksQueued.set({ lane: "unknown" }, 0);
