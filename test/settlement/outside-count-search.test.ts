import { expect } from "chai";
import type { Hex } from "viem";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { ANVIL_CHAIN_ID, startRpcProxy, type Anvil } from "../support/anvil.js";
import { createTestClock, type TestClock } from "../support/clock.js";
import { evmChainSettings, freshAddress, freshHotWallet, fundHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";
import { createCapturedLogger } from "../support/logs.js";
import type { SettlementWorker } from "../../core/settlement/worker.js";
import { chainQueueSuite, queuePayment, railWorker } from "../support/settlement-queue.js";

/**
 * The hot wallet used outside Vaultgate leaves the node's mined count above the nonce counter: the transaction below it
 * is searched for, to see it was signed for our network. While a payment waits for funds that count stays put, and
 * passes must not search again; a new count, or the node answering for another network, must.
 */
describe("the search for the hot wallet's outside use while a payment waits (anvil)", function () {
  this.timeout(120_000);
  const suite = chainQueueSuite();
  const { queue, workers } = suite;
  let other: Anvil | undefined;
  after(async () => {
    await other?.stop();
  });

  const lines = (log: ReturnType<typeof createCapturedLogger>, pattern: RegExp, paymentId: string) =>
    log
      .text()
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { msg: string; paymentId?: string })
      .filter((l) => l.paymentId === paymentId && pattern.test(l.msg)).length;

  /** A first payment paid with nonce 0 and final, so the wallet's nonce counter stands at 1 (the payment out of the queue). */
  async function paidOnce(worker: SettlementWorker, wallet: string, clock: TestClock) {
    const { anvil } = suite;
    const id = await queuePayment(queue, { chain: "eth", wallet, to: freshAddress(), amountCents: 10, at: clock() });
    await worker.runOnce(); // signed, and mined at once
    await anvil.mine(5);
    for (let i = 0; i < 5 && !(await queue.store.get(queue.db, id))!.final; i++) await worker.runOnce();
    expect(await queue.store.get(queue.db, id)).to.include({ status: "completed", nonce: 0, final: true });
    expect(await queue.store.nextNonce("eth", wallet)).to.equal(1);
  }

  it("an underfunded payment's passes search once per mined count, each still deciding on our network's word; funded, it takes the next nonce", async () => {
    const { anvil, usdc } = suite;
    const { key, account, wallet } = await freshHotWallet(anvil, usdc, 100);
    const counting = await startRpcProxy(anvil.url);
    try {
      const clock = createTestClock(); // frozen: the underfunded payment is due again at once
      const log = createCapturedLogger("info");
      const rail = createEvmRail(evmChainSettings(counting.url, usdc, { chain: "eth", rpcTimeoutMs: 5_000 }), account);
      const worker = railWorker(queue.store, rail, { clock, logger: log.logger, walletReadMs: 3_600_000 });
      workers.push(worker);
      await paidOnce(worker, wallet, clock);
      await anvil.transferUsdc(usdc, key, freshAddress(), centsToUnits(10)); // nonce 1, signed outside Vaultgate
      await anvil.mine(2_000); // a search back from the head takes a few dozen reads
      const id = await queuePayment(queue, { chain: "eth", wallet, to: freshAddress(), amountCents: 5_000, at: clock() });
      const countReads = async () => {
        const before = counting.count("eth_getTransactionCount");
        await worker.runOnce();
        return counting.count("eth_getTransactionCount") - before;
      };

      expect(await countReads(), "the first pass searches for the transaction below the count").to.be.above(10);
      const later = [];
      for (let i = 0; i < 4; i++) later.push(await countReads());
      expect(later, "a pass with the same mined count reads only that count, no search").to.deep.equal([1, 1, 1, 1]);
      expect(await queue.store.get(queue.db, id)).to.include({ status: "pending", nonce: null });
      expect(lines(log, /hot wallet cannot cover this payment/, id), "each pass decided it underfunded").to.equal(5);
      expect(lines(log, /another network/, id)).to.equal(0);

      await anvil.transferUsdc(usdc, key, freshAddress(), centsToUnits(10)); // nonce 2: the count moves on
      await anvil.mine(2_000);
      expect(await countReads(), "a new count is searched for again").to.be.above(10);
      await anvil.mintUsdc(usdc, wallet, centsToUnits(5_000));
      await worker.runOnce();
      expect(await queue.store.get(queue.db, id)).to.include({ status: "submitted", nonce: 3 });
    } finally {
      await counting.stop();
    }
  });

  it("a node switched to another network with the same count: its use below the count signs nothing; back, the payment is paid", async () => {
    const { anvil, usdc } = suite;
    const { key, account, wallet } = await freshHotWallet(anvil, usdc, 100);
    const proxy = await startRpcProxy(anvil.url);
    try {
      const clock = createTestClock();
      const log = createCapturedLogger("info");
      const rail = createEvmRail(evmChainSettings(proxy.url, usdc, { chain: "eth", rpcTimeoutMs: 5_000 }), account);
      const worker = railWorker(queue.store, rail, { clock, logger: log.logger, walletReadMs: 3_600_000 });
      workers.push(worker);
      await paidOnce(worker, wallet, clock);
      await anvil.transferUsdc(usdc, key, freshAddress(), centsToUnits(10)); // nonce 1 on our network, outside Vaultgate
      await anvil.mine(50);
      const id = await queuePayment(queue, { chain: "eth", wallet, to: freshAddress(), amountCents: 5_000, at: clock() });
      await worker.runOnce();
      expect(lines(log, /hot wallet cannot cover this payment/, id)).to.equal(1);

      // Another network where the same key holds plenty and has used nonces 0 and 1 too: the same count, its head past our search's block.
      const elsewhere = await startAnvilWithUsdc();
      other = elsewhere.anvil;
      expect(elsewhere.usdc).to.equal(usdc);
      await other.mine(Number(await anvil.client.getBlockNumber()));
      await fundHotWallet(other, usdc, wallet, centsToUnits(100_000));
      await other.rpc("anvil_setChainId", [999]);
      await other.rpc("anvil_impersonateAccount", [wallet]);
      for (let i = 0; i < 2; i++) {
        const hash = await other.rpc<Hex>("eth_sendTransaction", [{ from: wallet, to: wallet, value: "0x0" }]);
        await other.client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
      }
      expect(await other.client.getTransactionCount({ address: account.address })).to.equal(2);
      proxy.retarget(other.url, ANVIL_CHAIN_ID);
      for (let i = 0; i < 3; i++) await worker.runOnce();
      expect(await queue.store.get(queue.db, id)).to.include({ status: "pending", nonce: null });
      expect(lines(log, /counts hot wallet transactions signed for another network/, id), "each pass refused the other network's count").to.equal(3);

      proxy.retarget(anvil.url);
      await anvil.mintUsdc(usdc, wallet, centsToUnits(5_000));
      await worker.runOnce();
      expect(await queue.store.get(queue.db, id)).to.include({ status: "submitted", nonce: 2 });
    } finally {
      await proxy.stop();
    }
  });
});
