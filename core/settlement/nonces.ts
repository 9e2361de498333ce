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
