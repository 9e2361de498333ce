/**
 * Loads the rows for a set of keys in one statement; keys without a row are absent from
 * the map.
 */
export type BatchLoad<V> = (keys: string[]) => Promise<Map<string, V>>;

export interface CoalescerOptions {
  /** Statements of this loader running at once (default 2). */
  maxInFlight?: number;
  /** Keys per statement (default 256). */
  maxBatch?: number;
}

interface Waiter<V> {
  key: string;
  resolve(value: V | undefined): void;
  reject(err: unknown): void;
}

/**
 * Coalesces concurrent point reads into one statement per batch (the DataLoader pattern):
 * a read waits for a free slot, at most until the statement in flight returns, and
 * shares the next statement with the reads queued meanwhile. On this machine a database
 * round trip costs far more CPU than the rows it returns (one write syscall each way,
 * waking a backend), so under load this is most of the cost of a read.
 *
 * Every read is still fresh: its statement starts after the read was asked for, so it
 * sees every change committed before that (a revocation included). Use it only for reads
 * outside transactions; a failed statement fails every read it carried. Reads of the
 * same key in one statement get the same value object: callers must not mutate it.
 */
export function createCoalescer<V>(load: BatchLoad<V>, options: CoalescerOptions = {}): (key: string) => Promise<V | undefined> {
  const maxInFlight = options.maxInFlight ?? 2;
  const maxBatch = options.maxBatch ?? 256;
  let queue: Waiter<V>[] = [];
  let inFlight = 0;
  let scheduled = false;

  function flush() {
    scheduled = false;
    while (queue.length > 0 && inFlight < maxInFlight) {
      const batch = queue.length <= maxBatch ? queue : queue.slice(0, maxBatch);
      queue = batch === queue ? [] : queue.slice(maxBatch);
      inFlight++;
      void run(batch);
    }
  }

  async function run(batch: Waiter<V>[]) {
    try {
      const found = await load([...new Set(batch.map((w) => w.key))]);
      for (const w of batch) w.resolve(found.get(w.key));
    } catch (err) {
      for (const w of batch) w.reject(err);
    } finally {
      inFlight--;
      if (queue.length > 0) flush();
    }
  }

  return (key) =>
    new Promise<V | undefined>((resolve, reject) => {
      queue.push({ key, resolve, reject });
      // setImmediate: the reads of one event-loop turn (many sockets' requests) share a statement.
      if (!scheduled && inFlight < maxInFlight) {
        scheduled = true;
        setImmediate(flush);
      }
    });
}
