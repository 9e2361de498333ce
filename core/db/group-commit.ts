import { groupCommitBatchSize } from "../observability/metrics.js";

/**
 * Group commit (docs/architecture.md): items submitted in one event-loop turn go as one
 * statement in one transaction, so a busy path pays one round trip and WAL flush per batch.
 * A failed multi-item batch rolled back whole, so each item is retried alone and one bad item cannot fail the rest.
 */
export interface GroupCommitOptions {
  maxBatch: number;
  maxInFlight: number;
  /** Label of this batcher's batch-size histogram (vaultgate_group_commit_batch_size); default "unnamed". */
  name?: string;
}

interface Pending<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (err: unknown) => void;
}

export function createGroupCommit<I, O>(run: (items: I[]) => Promise<O[]>, options: GroupCommitOptions): (item: I) => Promise<O> {
  let queue: Pending<I, O>[] = [];
  let inFlight = 0;
  let scheduled = false;
  const batchSizes = groupCommitBatchSize.labels(options.name ?? "unnamed");

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

  function pump() {
    scheduled = false;
    while (inFlight < options.maxInFlight && queue.length > 0) {
      const batch = queue.length <= options.maxBatch ? queue : queue.slice(0, options.maxBatch);
      queue = queue.length <= options.maxBatch ? [] : queue.slice(options.maxBatch);
      inFlight++;
      batchSizes.observe(batch.length);
      void runBatch(batch).finally(() => {
        inFlight--;
        if (queue.length > 0 && !scheduled) pump();
      });
    }
  }

  return (item: I) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      if (!scheduled && inFlight < options.maxInFlight) {
        scheduled = true;
        setImmediate(pump);
      }
    });
}
