/**
 * Runs work for one key at a time, in arrival order; different keys run independently.
 * At most `maxWaiting` callers of a key wait (each an in-flight request); one more is
 * refused at once by `refuse`. Keys with nothing running are forgotten.
 */
export function createKeyedTurns(maxWaiting: number, refuse: () => never) {
  const lines = new Map<string, { waiting: number; tail: Promise<void> }>();
  return {
    async run<T>(key: string, work: () => Promise<T>): Promise<T> {
      let line = lines.get(key);
      if (line && line.waiting >= maxWaiting) refuse();
      // The first caller of an idle key runs at once; the others wait for the one before.
      const before = line?.tail;
      if (!line) lines.set(key, (line = { waiting: 0, tail: Promise.resolve() }));
      let done!: () => void;
      const mine = new Promise<void>((resolve) => (done = resolve));
      line.tail = mine;
      try {
        if (before) {
          line.waiting++;
          await before;
          line.waiting--;
        }
        return await work();
      } finally {
        done();
        if (line.tail === mine) lines.delete(key);
      }
    },
  };
}
