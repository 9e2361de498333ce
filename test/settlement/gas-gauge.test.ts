import { expect } from "chai";
import type { Anvil } from "../support/anvil.js";
import { startEvmRailStack, type EvmChain } from "../support/evm-rail.js";
import { coreMetricsListener } from "../support/metrics.js";
import { startStack, type TestStack } from "../support/stack.js";

/** An operator tops up the hot wallet and watches the gauges: they follow the chain with nothing queued, at most every 30 s. */
describe("the hot wallet gauges with nothing to settle (anvil)", function () {
  this.timeout(120_000);
  let chain: EvmChain & { stack: TestStack; wallet: string };
  let stack: TestStack;
  let anvil: Anvil;
  let metrics: Awaited<ReturnType<typeof coreMetricsListener>>;

  before(async () => {
    chain = await startEvmRailStack(startStack, 25_000);
    ({ stack, anvil } = chain);
    metrics = await coreMetricsListener();
  });
  after(async () => {
    await metrics?.close();
    await stack?.close();
    await anvil?.stop();
  });

  const gauges = async () => {
    const s = await metrics.scrape();
    return {
      gas: s.value("vaultgate_settlement_hot_wallet_gas_eth", { chain: "base" }),
      usdc: s.value("vaultgate_settlement_hot_wallet_balance_usdc", { chain: "base" }),
    };
  };

  it("a pass reads the wallet's gas and USDC when its last read is 30 s old, and not before, however many passes run", async () => {
    const pending = await stack.core.db("settlement_payments").whereIn("status", ["pending", "submitted"]).count({ n: "*" });
    expect(Number(pending[0]!.n), "nothing is queued").to.equal(0);
    await stack.core.settlement.worker.runOnce();
    expect(await gauges()).to.deep.equal({ gas: 100, usdc: 250 });

    await anvil.fundGas(chain.wallet, 0n);
    await anvil.mintUsdc(chain.usdc, chain.wallet, 5_000_000n);
    await stack.core.settlement.worker.runOnce();
    expect(await gauges(), "read at most every 30 s").to.deep.equal({ gas: 100, usdc: 250 });
    stack.clock.advance(30_000);
    await stack.core.settlement.worker.runOnce();
    expect(await gauges()).to.deep.equal({ gas: 0, usdc: 255 });

    await anvil.fundGas(chain.wallet, 2n * 10n ** 18n);
    stack.clock.advance(30_000);
    await Promise.all(Array.from({ length: 5 }, () => stack.core.settlement.worker.runOnce()));
    expect(await gauges(), "the operator sees the top-up").to.deep.equal({ gas: 2, usdc: 255 });
  });
});
