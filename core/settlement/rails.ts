import type { Logger } from "pino";
import type { EvmRail } from "./evm-rail.js";
import type { SettlementPayment } from "./records.js";

/**
 * The rail moving each claimed payment. A node reporting another chain id serves none (its blocks are no
 * evidence about ours); a retired wallet's signed payments are watched on their chain's node, never signed.
 */
export function createRailPicker(logger: Logger) {
  async function onTheirNetwork(rails: Map<string, EvmRail>, chains: Set<string>): Promise<Map<string, EvmRail>> {
    const checked = await Promise.all(
      [...chains].map(async (chain) => {
        const rail = rails.get(chain);
        if (!rail) return undefined;
        // No answer is not another network: the payment's steps meet the outage and are retried as ever, and
        // each decision asks again in stillOnItsNetwork, where no answer decides nothing.
        const id = await rail.chainId().catch(() => rail.settings.chainId);
        if (id === rail.settings.chainId) return rail;
        logger.error({ chain, expected: rail.settings.chainId, reported: id }, `chain ${chain}: its node now reports another network; its payments wait`);
        return undefined;
      }),
    );
    return new Map(checked.filter((r): r is EvmRail => r !== undefined).map((r) => [r.settings.chain, r]));
  }

  return {
    /** The rail of each payment (undefined: none here now), in the order given. */
    async pick(rails: Map<string, EvmRail>, claimed: SettlementPayment[]): Promise<(EvmRail | undefined)[]> {
      const onNetwork = await onTheirNetwork(rails, new Set(claimed.map((p) => p.chain)));
      return claimed.map((p) => {
        const rail = onNetwork.get(p.chain);
        // Unsigned, a retired wallet's payment is paid by the current one (the worker moves it over first).
        return !rail || rail.wallet === p.wallet || p.nonce === null ? rail : rail.watching(p.wallet);
      });
    },
    /**
     * Asked again once a payment's step has read what it decides on: `pick` asked before those reads, and a node
     * switched since answered them for another network. False (logged): nothing is decided on them.
     */
    async stillOnItsNetwork(rail: EvmRail, p: SettlementPayment, outcome: string): Promise<boolean> {
      const chainId = await rail.chainId();
      if (chainId === rail.settings.chainId) return true;
      logger.error({ paymentId: p.paymentId, chain: p.chain, chainId, expected: rail.settings.chainId }, `the node now reports another chain id; ${outcome}`);
      return false;
    },
  };
}
