/**
 * A small in-memory map whose entries expire at a given time and whose size is capped:
 * when full, the entry inserted longest ago goes first. Times are caller-supplied epoch
 * milliseconds so an injected clock drives expiry. `onEvict` hears of entries pushed out
 * by the cap (not of expired or deleted ones).
 */
export function createExpiringMap<V>(maxEntries: number, onEvict?: (key: string, value: V, until: number) => void) {
  const entries = new Map<string, { value: V; until: number }>();
  return {
    get(key: string, now: number): V | undefined {
      const e = entries.get(key);
      if (!e) return undefined;
      if (e.until <= now) {
        entries.delete(key);
        return undefined;
      }
      return e.value;
    },
    set(key: string, value: V, until: number): void {
      entries.delete(key);
      if (entries.size >= maxEntries) {
        const [oldest, e] = entries.entries().next().value!;
        entries.delete(oldest);
        onEvict?.(oldest, e.value, e.until);
      }
      entries.set(key, { value, until });
    },
    delete(key: string): void {
      entries.delete(key);
    },
    get size(): number {
      return entries.size;
    },
  };
}
