import { expect } from "chai";
import type { Hex } from "viem";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { startRpcProxy, type Anvil } from "../support/anvil.js";
import { createTestClock } from "../support/clock.js";
import { createCapturedLogger } from "../support/logs.js";
import { evmChainSettings, freshAddress, freshHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";
import { ownQueueDatabase, queuePayment, railWorker } from "../support/settlement-queue.js";

/** The gas ran out between the worker's read and its send: the node refuses the signed transfer. */
describe("a send refused for want of gas (anvil)", function () {
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

  it("stays submitted with its one nonce, logs that the wallet lacks gas, keeps its fee through the outage, and is paid once when gas arrives", async () => {
    const { key, account, wallet } = await freshHotWallet(anvil, usdc, 10_000);
    const proxy = await startRpcProxy(anvil.url);
    const logs = createCapturedLogger();
    const clock = createTestClock();
    const rail = createEvmRail(evmChainSettings(proxy.url, usdc, { chain: "op", rpcTimeoutMs: 5_000 }), account);
    const w = railWorker(queue.store, rail, { clock, logger: logs.logger, bumpAfterMs: 120_000 });
    try {
      const to = freshAddress();
      const at = clock();
      const id = await queuePayment(queue, { chain: "op", wallet, to, amountCents: 900, at, expiresAt: new Date(at.getTime() + 3600_000) });
      const send = proxy.hold(/eth_sendRawTransaction/);
      const pass = w.runOnce();
      await send.arrived;
      await anvil.fundGas(wallet, 0n);
      send.release();
      await pass;
      expect((await queue.store.get(queue.db, id))!.status).to.equal("submitted");
      const line = logs.lines.find((l) => l.includes("no ETH for gas"));
      expect(line, "the refused send says the hot wallet lacks gas").to.include(wallet);
      expect(line).to.not.include(key.slice(2));

      // Two hours of outage, past expiry: a refused transaction never reached a mempool, so nothing is re-signed dearer.
      for (let i = 0; i < 60; i++) {
        clock.advance(120_000);
        await w.runOnce();
      }
      const fees = (await queue.store.transactions(id)).map((t) => t.maxFeePerGas);
      expect(fees.length, "one transfer and at most one cancellation").to.be.at.most(2);
      expect(await anvil.client.getTransactionCount({ address: wallet as Hex })).to.equal(0);

      await anvil.fundGas(wallet);
      await w.runOnce();
      await anvil.mine(4);
      await w.runOnce();
      const done = (await queue.store.get(queue.db, id))!;
      expect(["completed", "failed"]).to.include(done.status);
      expect(await anvil.client.getTransactionCount({ address: wallet as Hex }), "one nonce used").to.equal(1);
      expect(await anvil.usdcBalance(usdc, to)).to.equal(done.status === "completed" ? centsToUnits(900) : 0n);
    } finally {
      await w.stop();
      await proxy.stop();
    }
  });
});
