import type { SettlementPayment } from "./records.js";
import type { SettlementStore, SignCheck } from "./store.js";

type Wallet = { chain: string; wallet: string };

const FIRST = "00000000-0000-0000-0000-000000000000";

/**
 * A walk, a page a pass, over the unsigned payments of hot wallets this core does not pay from (node
 * down, key replaced and not listed, chain back on sandbox): those a close or revocation stopped are
 * leased to be cancelled now, not at their expiry. The rest stay where they are, due as they were.
 */
export function createElsewhereWalk(options: { store: SettlementStore; check?: SignCheck; pageSize: number; everyMs: number }) {
  const { store, check, pageSize, everyMs } = options;
  let after = FIRST;
  let lastAt = Number.NEGATIVE_INFINITY;
  return async function stoppedElsewhere(except: Wallet[], now: Date, leaseUntil: Date): Promise<SettlementPayment[]> {
    // A page per `everyMs` of real time: the walk reads past every unsigned payment of the served wallets too.
    if (!check || performance.now() - lastAt < everyMs) return [];
    lastAt = performance.now();
    const page = await store.unsignedElsewhere(except, now, after, pageSize);
    after = page.length < pageSize ? FIRST : page[page.length - 1]!.paymentId;
    const ids = [...(await check(page))].flatMap(([id, verdict]) => (verdict === "stop" ? [id] : []));
    return ids.length === 0 ? [] : store.claim([], now, leaseUntil, pageSize, { unsignedIds: ids });
  };
}
