/** A size-capped map of expiring entries (oldest insert goes first when full); times come from the
 * caller's clock. `onEvict` hears only of entries pushed out by the cap. */
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
