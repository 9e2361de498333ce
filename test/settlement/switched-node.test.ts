import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import pino from "pino";
import { privateKeyToAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { createSettlementStore } from "../../core/settlement/store.js";
import { createSettlementWorker } from "../../core/settlement/worker.js";
import { startAnvil, startRpcProxy } from "../support/anvil.js";
import { testDatabase } from "../support/db.js";
import { evmChainSettings, fundHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";

/**
 * A chain's RPC address that starts answering for another network (a moved load balancer, a
 * mistyped failover): that network's use of the hot wallet's nonces is no evidence of ours.
 */
describe("settlement when a chain's node is switched to another network (anvil)", function () {
  this.timeout(120_000);

  it("nothing is failed or refunded on the other network's word; back on its own, the payment completes once", async () => {
    const { anvil, usdc } = await startAnvilWithUsdc();
    const other = await startAnvil();
    const proxy = await startRpcProxy(anvil.url);
    const { db } = await testDatabase();
    const store = createSettlementStore(db);
    const wallet = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    const to = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;
    const rail = createEvmRail(evmChainSettings(proxy.url, usdc, { chain: "eth", rpcTimeoutMs: 300 }), wallet);
    const worker = createSettlementWorker({
      store,
      rails: () => new Map([["eth", rail]]),
      clock: () => new Date(),
      logger: pino({ level: "silent" }),
      pollMs: 0,
      recheckMs: 0,
      underfundedRetryMs: 0,
    });
    try {
      await fundHotWallet(anvil, usdc, wallet.address, centsToUnits(10_000));
      await anvil.setAutomine(false);
      const paymentId = randomUUID();
      const at = new Date();
      await store.insert(db, {
        paymentId,
        chain: "eth",
        rail: "evm",
        wallet: wallet.address.toLowerCase(),
        recipient: to,
        amountCents: 900,
        currency: "USD",
        at,
        expiresAt: new Date(at.getTime() + 3600_000),
      });
      await worker.runOnce(); // signed with nonce 0 and waiting in the network's mempool
      expect((await store.get(db, paymentId))!.status).to.equal("submitted");

      // On the other network the same key has used nonce 0, long since final.
      await other.fundGas(wallet.address);
      await other.rpc("anvil_impersonateAccount", [wallet.address]);
      await other.rpc("eth_sendTransaction", [{ from: wallet.address, to: wallet.address, value: "0x0" }]);
      await other.mine(10);
      proxy.retarget(other.url, 999);
      for (let i = 0; i < 5; i++) await worker.runOnce();
      expect((await store.get(db, paymentId))!.status).to.equal("submitted");

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
  });
});
