import type { Logger } from "pino";
import { formatEther } from "viem";
import type { EvmRail } from "./evm-rail.js";
import { hotWalletBalance, hotWalletGas } from "./metrics.js";
import { formatUsdc } from "./rules.js";

/** Reads a hot wallet's gas and USDC into the gauges when its last read is `everyMs` old; never two reads of a chain at once. */
export function createWalletGauges(options: { logger: Logger; everyMs: number }) {
  const { logger, everyMs } = options;
  const reads = new Map<string, { at: number; running: boolean }>();
  return async function readWallet(rail: EvmRail, now: Date): Promise<void> {
    const chain = rail.settings.chain;
    const last = reads.get(chain);
    if (last && (last.running || now.getTime() - last.at < everyMs)) return;
    reads.set(chain, { at: now.getTime(), running: true });
    try {
      const at = await rail.blockNumber();
      const [gasWei, balanceUnits] = await Promise.all([rail.gasBalance(at), rail.usdcBalance(undefined, at)]);
      hotWalletGas.set({ chain }, Number(formatEther(gasWei)));
      hotWalletBalance.set({ chain }, Number(formatUsdc(balanceUnits)));
    } catch (err) {
      logger.warn({ chain, err: { name: (err as Error).name } }, "hot wallet read failed; its gauges keep their last value");
    } finally {
      reads.set(chain, { at: now.getTime(), running: false });
    }
  };
}
