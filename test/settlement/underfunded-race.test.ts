import { expect } from "chai";
import type { PrivateKeyAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { SettlementWorkerOptions } from "../../core/settlement/worker.js";
import { startRpcProxy } from "../support/anvil.js";
import { createTestClock, type TestClock } from "../support/clock.js";
import { evmChainSettings, freshAddress, freshHotWallet } from "../support/evm-rail.js";
import { chainQueueSuite, queuePayment, railWorker } from "../support/settlement-queue.js";

/** Two workers on one hot wallet: the balance one reads must be weighed against what was in flight at the same block. */
describe("the hot wallet's balance against payments in flight (anvil)", function () {
  this.timeout(120_000);
  const suite = chainQueueSuite();
  const { queue, workers } = suite;

  function worker(rpcUrl: string, account: PrivateKeyAccount, clock: TestClock, over: Partial<SettlementWorkerOptions> = {}) {
    const rail = createEvmRail(evmChainSettings(rpcUrl, suite.usdc, { chain: "arb", rpcTimeoutMs: 5_000 }), account);
    const w = railWorker(queue.store, rail, { clock, ...over });
    workers.push(w);
    return w;
  }

  const accept = (wallet: string, to: string, amountCents: number, at: Date) => queuePayment(queue, { chain: "arb", wallet, to, amountCents, at });

  it("a transfer mined between another worker's balance read and its signing is still counted: the next payment waits, none reverts", async () => {
    const { anvil, usdc } = suite;
    const { account, wallet } = await freshHotWallet(anvil, usdc, 1_000);
    const proxy = await startRpcProxy(anvil.url);
    try {
      const t0 = new Date();
      const clockA = createTestClock(t0);
      const clockB = createTestClock(t0);
      const a = worker(anvil.url, account, clockA, { recheckMs: 60_000 });
      const b = worker(proxy.url, account, clockB, { recheckMs: 0, leaseMs: 600_000 });
      await anvil.setAutomine(false);
      const first = await accept(wallet, freshAddress(), 600, t0);
      await a.runOnce(); // signed and in the node's pool, not mined
      expect((await queue.store.get(queue.db, first))!.status).to.equal("submitted");
      const second = await accept(wallet, freshAddress(), 600, t0);
      // B reads the balance (the first transfer not mined yet) and is held before it signs.
      const gate = proxy.hold(/eth_maxPriorityFeePerGas/);
      const passB = b.runOnce();
      await gate.arrived;
      await gate.answered("eth_call");
      await anvil.mine(1); // the first transfer is mined: the wallet now holds $4
      clockA.advance(61_000);
      await a.runOnce(); // A records the first transfer as mined
      expect((await queue.store.get(queue.db, first))!.minedBlock).to.not.equal(null);
      gate.release();
      await passB;
      const held = (await queue.store.get(queue.db, second))!;
      expect(held.status, "the second payment must wait for funds, never go out to revert").to.equal("pending");
      expect(held.nonce).to.equal(null);
      await anvil.mintUsdc(usdc, wallet, centsToUnits(200));
      await b.runOnce();
      await anvil.mine(2);
      await b.runOnce();
      expect((await queue.store.get(queue.db, second))!.status).to.equal("completed");
    } finally {
      await anvil.setAutomine(true);
      await proxy.stop();
    }
  });
});
