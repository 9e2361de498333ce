import { expect } from "chai";
import type { Hex } from "viem";
import { createEvmRail, TRANSFER_GAS } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { Anvil } from "../support/anvil.js";
import { createTestClock } from "../support/clock.js";
import { evmChainSettings, freshAddress, freshHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";
import { ownQueueDatabase, queuePayment, railWorker } from "../support/settlement-queue.js";

/** A stuck transfer is replaced only by one the hot wallet's gas can pay: a node refuses the rest, and then only they were sent again. */
describe("a fee bump the hot wallet's gas cannot pay (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let usdc: Hex;
  const queue = ownQueueDatabase();

  before(async () => {
    ({ anvil, usdc } = await startAnvilWithUsdc());
  });
  after(async () => {
    await anvil?.stop();
  });

  it("is not signed: the transfer the gas can pay is sent again, and once its node lost it, mined from those bytes and paid once", async () => {
    const { account, wallet } = await freshHotWallet(anvil, usdc, 10_000);
    const clock = createTestClock();
    const w = railWorker(queue.store, createEvmRail(evmChainSettings(anvil.url, usdc, { chain: "polygon" }), account), {
      clock,
      bumpAfterMs: 120_000,
    });
    try {
      const to = freshAddress();
      const id = await queuePayment(queue, { chain: "polygon", wallet, to, amountCents: 400, at: clock() });
      await anvil.setAutomine(false);
      await w.runOnce();
      const [first] = await queue.store.transactions(id);
      // Gas for this transfer at its own fee, not for a replacement 12.5% dearer.
      await anvil.fundGas(wallet, (TRANSFER_GAS * first!.maxFeePerGas * 105n) / 100n);
      for (let i = 0; i < 3; i++) {
        clock.advance(120_000);
        await w.runOnce();
      }
      expect(
        (await queue.store.transactions(id)).map((t) => t.txHash),
        "no replacement the wallet cannot pay",
      ).to.deep.equal([first!.txHash]);

      // The node lost the transfer (a restart, an eviction): the bytes sent again are the ones it takes.
      await anvil.rpc("anvil_dropTransaction", [first!.txHash]);
      await w.runOnce();
      for (let i = 0; i < 4; i++) {
        await anvil.mine(1);
        await w.runOnce();
      }
      const done = (await queue.store.get(queue.db, id))!;
      expect(done).to.deep.include({ status: "completed", txHash: first!.txHash });
      expect(await anvil.usdcBalance(usdc, to)).to.equal(centsToUnits(400));
      expect(await anvil.client.getTransactionCount({ address: wallet as Hex })).to.equal(1);
    } finally {
      await anvil.setAutomine(true);
      await w.stop();
    }
  });
});
