import type { EvmRail } from "./evm-rail.js";

/**
 * The hot wallet's transaction that used `nonce` (hash and chain id), from the first block whose mined
 * count passes it: searched back from `used` (a block where it has), doubling, then halving.
 */
export async function nonceTakenBy(rail: EvmRail, nonce: number, used: number): Promise<{ hash: string; chainId: number | undefined } | undefined> {
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
  return rail.walletTransactionIn(hi, nonce);
}

/**
 * Whether the chain's mined count (at block `at`) may move the nonce counter past `next`: only when the hot wallet's
 * transaction below it was signed for this network, since a node answering for two networks may count another's.
 */
export async function minedCountIsOurs(rail: EvmRail, chainNonce: number, next: number | undefined, at: number): Promise<boolean> {
  if (chainNonce <= (next ?? 0)) return true;
  const taker = await nonceTakenBy(rail, chainNonce - 1, at);
  return taker?.chainId === rail.settings.chainId;
}
