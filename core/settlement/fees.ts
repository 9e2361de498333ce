import type { Fees } from "./evm-rail.js";

/** A fee bump raises both fees by at least this fraction (nodes ask 10% for a replacement). */
const BUMP_NUMERATOR = 1125n;
const BUMP_DENOMINATOR = 1000n;

/** No bump once the last offer is this many times what the network asks: an outage never compounds fees. */
const BUMP_CEILING = 2n;

/** The larger of two fees (Math.max takes numbers, not bigints). */
const larger = (a: bigint, b: bigint): bigint => (a > b ? a : b);

/** True when the last offer is already at the bump ceiling for what the network asks now. */
export const atBumpCeiling = (last: Fees, network: Fees): boolean => last.maxFeePerGas >= network.maxFeePerGas * BUMP_CEILING;

/** A replacement's fees: what the network asks, and at least 12.5% above the last offer on both fees. */
export function replacementFees(network: Fees, last: Fees): Fees {
  const up = (x: bigint) => (x * BUMP_NUMERATOR) / BUMP_DENOMINATOR + 1n;
  const priorityFee = larger(network.priorityFee, up(last.priorityFee));
  const maxFee = larger(network.maxFeePerGas, up(last.maxFeePerGas));
  return { priorityFee, maxFeePerGas: larger(maxFee, priorityFee) };
}
