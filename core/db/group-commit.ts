import { abandoned, canAbort } from "../deadlines.js";
import { groupCommitBatchSize, groupCommitQueued } from "../observability/metrics.js";

/**
 * Group commit (docs/architecture.md): items submitted in one event-loop turn go as one
 * statement in one transaction, so a busy path pays one round trip and WAL flush per batch.
 * A failed multi-item batch rolled back whole, so each item is retried alone and one bad item cannot fail the rest.
 */
export interface GroupCommitOptions<I = unknown> {
  maxBatch: number;
  maxInFlight: number;
  /** Label of this batcher's batch-size histogram (vaultgate_group_commit_batch_size); default "unnamed". */
  name?: string;
  /**
   * The row an item locks until its batch commits (e.g. a counter). Items whose row a running
   * batch holds wait for the next batch instead of blocking a second one on that lock.
   */
  lockKey?: (item: I) => string;
  /**
   * The caller's signal (ctx.signal): an item whose signal aborts (its deadline passed) before a batch
   * takes it leaves the queue unwritten; once in a batch, it commits or rolls back with the batch.
   */
  signalOf?: (item: I) => AbortSignal | undefined;
}

interface Pending<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (err: unknown) => void;
  /** Stops listening to the caller's signal once the item is in a batch. */
  quiet?: () => void;
}

export function createGroupCommit<I, O>(run: (items: I[]) => Promise<O[]>, options: GroupCommitOptions<I>): (item: I) => Promise<O> {
  let queue: Pending<I, O>[] = [];
  let inFlight = 0;
  let scheduled = false;
  // Lock keys held by running batches, with how many items of each.
  const held = new Map<string, number>();
  const batchSizes = groupCommitBatchSize.labels(options.name ?? "unnamed");
  const waiting = groupCommitQueued.labels(options.name ?? "unnamed");

  function settle(batch: Pending<I, O>[], outs: O[]) {
    if (outs.length !== batch.length) throw new Error(`group commit: ${outs.length} results for ${batch.length} items`);
    batch.forEach((p, i) => {
      p.resolve(outs[i]!);
    });
  }

  async function runBatch(batch: Pending<I, O>[]) {
    try {
      settle(batch, await run(batch.map((p) => p.item)));
    } catch (err) {
      if (batch.length === 1) {
        batch[0]!.reject(err);
        return;
      }
      await Promise.all(
        batch.map(async (p) => {
          try {
            settle([p], await run([p.item]));
          } catch (itemErr) {
            p.reject(itemErr);
          }
        }),
      );
    }
  }

  function take(): Pending<I, O>[] {
    const lockKey = options.lockKey;
    if (!lockKey) {
      const batch = queue.slice(0, options.maxBatch);
      queue = queue.slice(batch.length);
      return batch;
    }
    const batch: Pending<I, O>[] = [];
    const rest: Pending<I, O>[] = [];
    for (const p of queue) (batch.length < options.maxBatch && !held.has(lockKey(p.item)) ? batch : rest).push(p);
    // Keys are marked after the scan: one batch may carry many items of one key.
    for (const p of batch) held.set(lockKey(p.item), (held.get(lockKey(p.item)) ?? 0) + 1);
    queue = rest;
    return batch;
  }

  function release(batch: Pending<I, O>[]) {
    if (!options.lockKey) return;
    for (const p of batch) {
      const key = options.lockKey(p.item);
      const n = (held.get(key) ?? 1) - 1;
      if (n === 0) held.delete(key);
      else held.set(key, n);
    }
  }

  function pump() {
    scheduled = false;
    while (inFlight < options.maxInFlight && queue.length > 0) {
      const batch = take();
      if (batch.length === 0) return;
      waiting.dec(batch.length);
      for (const p of batch) p.quiet?.();
      inFlight++;
      batchSizes.observe(batch.length);
      void runBatch(batch).finally(() => {
        release(batch);
        inFlight--;
        if (queue.length > 0 && !scheduled) pump();
      });
    }
  }

  return (item: I) =>
    new Promise<O>((resolve, reject) => {
      const p: Pending<I, O> = { item, resolve, reject };
      const signal = options.signalOf?.(item);
      if (canAbort(signal)) {
        if (signal.aborted) return reject(abandoned(signal, "before its write was queued"));
        const leave = () => {
          const at = queue.indexOf(p);
          if (at >= 0) {
            queue.splice(at, 1);
            waiting.dec();
          }
          reject(abandoned(signal, "while its write waited for a batch"));
        };
        signal.addEventListener("abort", leave, { once: true });
        p.quiet = () => signal.removeEventListener("abort", leave);
      }
      queue.push(p);
      waiting.inc();
      if (!scheduled && inFlight < options.maxInFlight) {
        scheduled = true;
        setImmediate(pump);
      }
    });
}
