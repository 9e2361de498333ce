import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Hex } from "viem";
import { privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { ANVIL_CHAIN_ID, startAnvil, startRpcProxy, type RpcProxy } from "../support/anvil.js";
import { evmChainSettings, freshAddress, fundHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";
import { ownQueueDatabase, queuePayment, railWorker } from "../support/settlement-queue.js";

/**
 * A chain's RPC address that starts answering for another network (a moved load balancer, a
 * mistyped failover): that network's use of the hot wallet's nonces is no evidence of ours.
 */
describe("settlement when a chain's node is switched to another network (anvil)", function () {
  this.timeout(120_000);
  const queue = ownQueueDatabase();

  /**
   * A payment signed with nonce 0 and unmined; on another network the same key has used nonce 0, long since
   * final, and the proxy forwards there reporting `reported` as the chain id. Nothing fails or is refunded on
   * that network's word; back on its own, the payment completes once.
   */
  async function otherNetworkUsesTheNonce(reported: number) {
    const { anvil, usdc } = await startAnvilWithUsdc();
    const other = await startAnvil();
    await other.rpc("anvil_setChainId", [999]);
    const proxy = await startRpcProxy(anvil.url);
    const { db, store } = queue;
    const wallet = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    const to = freshAddress();
    const worker = railWorker(store, createEvmRail(evmChainSettings(proxy.url, usdc, { chain: "eth", rpcTimeoutMs: 300 }), wallet));
    try {
      await fundHotWallet(anvil, usdc, wallet.address, centsToUnits(10_000));
      await anvil.setAutomine(false);
      const paymentId = await queuePayment(queue, { chain: "eth", wallet: wallet.address, to, amountCents: 900 });
      await worker.runOnce(); // signed with nonce 0 and waiting in the network's mempool
      expect((await store.get(db, paymentId))!.status).to.equal("submitted");

      await other.fundGas(wallet.address);
      await other.rpc("anvil_impersonateAccount", [wallet.address]);
      await other.rpc("eth_sendTransaction", [{ from: wallet.address, to: wallet.address, value: "0x0" }]);
      await other.mine(10);
      proxy.retarget(other.url, reported);
      for (let i = 0; i < 5; i++) await worker.runOnce();
      expect(await store.get(db, paymentId)).to.include({ status: "submitted", failureReason: null });

      proxy.retarget(anvil.url);
      await anvil.mine(5);
      for (let i = 0; i < 10 && (await store.get(db, paymentId))!.status !== "completed"; i++) await worker.runOnce();
      expect((await store.get(db, paymentId))!.status).to.equal("completed");
      expect(await anvil.usdcBalance(usdc, to)).to.equal(centsToUnits(900));
    } finally {
      await worker.stop();
      await proxy.stop();
      await other.stop();
      await anvil.stop();
    }
  }

  it("nothing is failed or refunded on the other network's word; back on its own, the payment completes once", async () => {
    await otherNetworkUsesTheNonce(999);
  });

  it("a node that reports our chain id with another network's blocks: that network's use of the nonce refunds nothing; back, paid once", async () => {
    // Every chain-id check passes: only the transaction that used the nonce names its network.
    await otherNetworkUsesTheNonce(ANVIL_CHAIN_ID);
  });

  /**
   * On another network the same key holds USDC and has used nonces 0 to 2, and the proxy forwards there
   * reporting `reported` as the chain id: nothing is signed meanwhile; back, payments take nonces 0 and 1.
   */
  async function otherNetworkNoncesAndBalance(reported: number) {
    const { anvil, usdc } = await startAnvilWithUsdc();
    const other = await startAnvilWithUsdc();
    const proxy = await startRpcProxy(anvil.url);
    const { db, store } = queue;
    const wallet = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    const worker = railWorker(store, createEvmRail(evmChainSettings(proxy.url, usdc, { chain: "eth", rpcTimeoutMs: 300 }), wallet));
    try {
      expect(other.usdc).to.equal(usdc);
      await fundHotWallet(anvil, usdc, wallet.address, centsToUnits(10_000));
      // On the other network (chain id 999) the same key holds USDC too and has used nonces 0 to 2.
      await fundHotWallet(other.anvil, usdc, wallet.address, centsToUnits(10_000));
      await other.anvil.rpc("anvil_setChainId", [999]);
      await other.anvil.rpc("anvil_impersonateAccount", [wallet.address]);
      for (let i = 0; i < 3; i++) await other.anvil.rpc("eth_sendTransaction", [{ from: wallet.address, to: wallet.address, value: "0x0" }]);
      await other.anvil.mine(2);
      proxy.retarget(other.anvil.url, reported);
      const first = await queuePayment(queue, { chain: "eth", wallet: wallet.address, to: freshAddress(), amountCents: 900 });
      for (let i = 0; i < 3; i++) await worker.runOnce();
      expect(await store.get(db, first)).to.include({ status: "pending", nonce: null });

      proxy.retarget(anvil.url);
      const second = await queuePayment(queue, { chain: "eth", wallet: wallet.address, to: freshAddress(), amountCents: 100 });
      const done = async () => [(await store.get(db, first))!.status, (await store.get(db, second))!.status];
      for (let i = 0; i < 20 && (await done()).some((s) => s !== "completed"); i++) {
        await anvil.mine(1);
        await worker.runOnce();
      }
      expect(await done()).to.deep.equal(["completed", "completed"]);
      expect([(await store.get(db, first))!.nonce, (await store.get(db, second))!.nonce].sort()).to.deep.equal([0, 1]);
    } finally {
      await worker.stop();
      await proxy.stop();
      await other.anvil.stop();
      await anvil.stop();
    }
  }

  it("nothing is signed on the other network's nonces and balance; back on its own, payments take the next nonces and complete", async () => {
    await otherNetworkNoncesAndBalance(999);
  });

  it("a node that reports our chain id with another network's nonces: nothing is signed past them; back, payments take nonces 0 and 1", async () => {
    // Every chain-id check passes: only the hot wallet's latest transaction names its network.
    await otherNetworkNoncesAndBalance(ANVIL_CHAIN_ID);
  });

  /** A worker paying chain eth through `proxy` from `wallet`; its gauges read the wallet once an hour, so a pass reads only for its payments. */
  const proxiedWorker = (proxy: RpcProxy, usdc: Hex, wallet: PrivateKeyAccount) =>
    railWorker(queue.store, createEvmRail(evmChainSettings(proxy.url, usdc, { chain: "eth", rpcTimeoutMs: 5_000 }), wallet), { walletReadMs: 3_600_000 });

  it("switched after the pass looked at the network and before the payment's reads: nothing is signed on them; back, it is paid with nonce 0", async () => {
    const { anvil, usdc } = await startAnvilWithUsdc();
    const other = await startAnvilWithUsdc();
    const proxy = await startRpcProxy(anvil.url);
    const { db, store } = queue;
    const wallet = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    const to = freshAddress();
    const worker = proxiedWorker(proxy, usdc, wallet);
    try {
      await fundHotWallet(anvil, usdc, wallet.address, centsToUnits(10_000));
      // On the other network the same key holds USDC too and has used nonces 0 to 2.
      await fundHotWallet(other.anvil, usdc, wallet.address, centsToUnits(10_000));
      await other.anvil.rpc("anvil_impersonateAccount", [wallet.address]);
      for (let i = 0; i < 3; i++) await other.anvil.rpc("eth_sendTransaction", [{ from: wallet.address, to: wallet.address, value: "0x0" }]);
      await worker.runOnce(); // the gauges' read of the hour
      const id = await queuePayment(queue, { chain: "eth", wallet: wallet.address, to, amountCents: 900 });
      const reads = proxy.hold(/"eth_blockNumber"/);
      const pass = worker.runOnce();
      await reads.arrived;
      proxy.retarget(other.anvil.url, 999);
      reads.release();
      await pass;
      expect(await store.get(db, id)).to.include({ status: "pending", nonce: null });

      proxy.retarget(anvil.url);
      for (let i = 0; i < 10 && (await store.get(db, id))!.status !== "completed"; i++) {
        await worker.runOnce();
        await anvil.mine(1);
      }
      expect(await store.get(db, id)).to.include({ status: "completed", nonce: 0 });
      expect(await anvil.usdcBalance(usdc, to)).to.equal(centsToUnits(900));
    } finally {
      await worker.stop();
      await proxy.stop();
      await other.anvil.stop();
      await anvil.stop();
    }
  });

  it("switched in the middle of a completed transfer's look: the other network's blocks are no reorg; back, it becomes final, completed once", async () => {
    const { anvil, usdc } = await startAnvilWithUsdc();
    const other = await startAnvil();
    const proxy = await startRpcProxy(anvil.url);
    const { db, store } = queue;
    const wallet = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    const worker = proxiedWorker(proxy, usdc, wallet);
    try {
      await fundHotWallet(anvil, usdc, wallet.address, centsToUnits(10_000));
      await other.mine(100); // blocks at every height ours has, with other hashes
      const id = await queuePayment(queue, { chain: "eth", wallet: wallet.address, to: freshAddress(), amountCents: 900 });
      await worker.runOnce();
      await anvil.mine(2);
      await worker.runOnce();
      const done = (await store.get(db, id))!;
      expect(done).to.include({ status: "completed", final: false });
      const reads = proxy.hold(/"eth_blockNumber"/);
      const pass = worker.runOnce();
      await reads.arrived;
      proxy.retarget(other.url, 999);
      reads.release();
      await pass;
      expect(await store.get(db, id)).to.deep.include({ status: "completed", minedBlockHash: done.minedBlockHash, completedAt: done.completedAt });

      proxy.retarget(anvil.url);
      await anvil.mine(4);
      await worker.runOnce();
      expect(await store.get(db, id)).to.include({ status: "completed", final: true, txHash: done.txHash });
    } finally {
      await worker.stop();
      await proxy.stop();
      await other.stop();
      await anvil.stop();
    }
  });
});
