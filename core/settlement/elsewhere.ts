import type { SettlementPayment, SettlementStore, StopCheck } from "./store.js";

type Wallet = { chain: string; wallet: string };

const FIRST = "00000000-0000-0000-0000-000000000000";

/**
 * A walk, a page a pass, over the unsigned payments of hot wallets this core does not pay from (node
 * down, key replaced and not listed, chain back on sandbox): those a close or revocation stopped are
 * leased to be cancelled now, not at their expiry. The rest stay where they are, due as they were.
 */
export function createElsewhereWalk(options: { store: SettlementStore; stopped?: StopCheck; pageSize: number }) {
  const { store, stopped, pageSize } = options;
  let after = FIRST;
  return async function stoppedElsewhere(except: Wallet[], now: Date, leaseUntil: Date): Promise<SettlementPayment[]> {
    if (!stopped) return [];
    const page = await store.unsignedElsewhere(except, now, after, pageSize);
    after = page.length < pageSize ? FIRST : page[page.length - 1]!.paymentId;
    const ids = await stopped(page);
    return ids.size === 0 ? [] : store.claim([], now, leaseUntil, pageSize, { unsignedIds: [...ids] });
  };
}
