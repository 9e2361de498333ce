import type { EvmRail } from "./evm-rail.js";

/**
 * The hot wallet's transaction that used `nonce` (hash, chain id and block), from the first block whose mined
 * count passes it: searched back from `used` (a block where it has), doubling, then halving.
 */
export async function nonceTakenBy(
  rail: EvmRail,
  nonce: number,
  used: number,
): Promise<{ hash: string; chainId: number | undefined; block: number } | undefined> {
  let hi = used;
  let lo = used;
  for (let step = 1; hi > 0; step *= 2) {
    lo = Math.max(0, hi - step);
    if ((await rail.minedNonce(lo)) <= nonce) break;
    hi = lo;
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if ((await rail.minedNonce(mid)) > nonce) hi = mid;
    else lo = mid;
  }
  const taker = await rail.walletTransactionIn(hi, nonce);
  return taker && { ...taker, block: hi };
}

/**
 * Whether the chain's mined count (at block `at`) may move the nonce counter past `next`: only when the hot wallet's
 * transaction below it was signed for this network, since a node answering for two networks may count another's.
 * One per worker: while a count stays above the counter (an underfunded payment waits), passes do not search again.
 */
export function createMinedCountCheck() {
  // Kept is where the search found the transaction below the count, not the verdict: a nonce is used once on a chain,
  // so that block still holding it answers as a search would, in one read; a switched network or a reorg shows
  // another block there (or none), and then the search runs again. One entry per chain, replaced as its count moves.
  const below = new Map<string, { wallet: string; count: number; block: Promise<number | undefined> }>();
  return async function minedCountIsOurs(rail: EvmRail, chainNonce: number, next: number | undefined, at: number): Promise<boolean> {
    if (chainNonce <= (next ?? 0)) return true;
    const chain = rail.settings.chain;
    const known = below.get(chain);
    if (known && known.wallet === rail.wallet && known.count === chainNonce) {
      const block = await known.block;
      const taker = block !== undefined && block <= at ? await rail.walletTransactionIn(block, chainNonce - 1) : undefined;
      if (taker) return taker.chainId === rail.settings.chainId;
    }
    const search = nonceTakenBy(rail, chainNonce - 1, at);
    // Payments of one pass share a search under way; a failed one is no block, so the next look searches again.
    below.set(chain, {
      wallet: rail.wallet,
      count: chainNonce,
      block: search.then(
        (t) => t?.block,
        () => undefined,
      ),
    });
    const taker = await search;
    return taker?.chainId === rail.settings.chainId;
  };
}
