import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Hex } from "viem";
import { privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import type { EvmChainSettings } from "../../core/settlement/config.js";
import { createEvmRail, type EvmRail } from "../../core/settlement/evm-rail.js";
import { coreRegistry } from "../../core/observability/metrics.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { SettlementPayment } from "../../core/settlement/records.js";
import type { SettlementWorker, SettlementWorkerOptions } from "../../core/settlement/worker.js";
import { ANVIL_CHAIN_ID, startRpcProxy, type Anvil } from "../support/anvil.js";
import { createTestClock } from "../support/clock.js";
import { requirePostgres } from "../support/db.js";
import { evmChainSettings, fundHotWallet, mineWithTokenCode, startAnvilWithUsdc } from "../support/evm-rail.js";
import { ownQueueDatabase, queuePayment, railWorker } from "../support/settlement-queue.js";

describe("settlement on a local chain (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let usdc: Hex;
  const queue = ownQueueDatabase();
  const workers: SettlementWorker[] = [];

  before(async () => {
    ({ anvil, usdc } = await startAnvilWithUsdc());
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await anvil.setAutomine(true);
  });
  after(async () => {
    await anvil?.stop();
  });

  const settings = (rpcUrl = anvil.url, over: Partial<EvmChainSettings> = {}): EvmChainSettings =>
    evmChainSettings(rpcUrl, usdc, { chain: "eth", rpcTimeoutMs: 300, ...over });

  /** A hot wallet of the test's own (with gas), so tests never see each other's payments. */
  async function hotWallet(usdcUnits = centsToUnits(1_000_000)): Promise<PrivateKeyAccount> {
    const account = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    await fundHotWallet(anvil, usdc, account.address, usdcUnits);
    return account;
  }

  function worker(rail: EvmRail, over: Partial<SettlementWorkerOptions> = {}): SettlementWorker {
    const w = railWorker(queue.store, rail, over);
    workers.push(w);
    return w;
  }

  const recipient = () => privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;

  async function accept(
    wallet: PrivateKeyAccount,
    to: string,
    amountCents: number,
    at = new Date(),
    expiresAt = new Date(at.getTime() + 3600_000),
  ): Promise<string> {
    return queuePayment(queue, { chain: "eth", wallet: wallet.address, to, amountCents, at, expiresAt });
  }

  const get = async (id: string) => (await queue.store.get(queue.db, id))!;

  /** Runs passes until the payment is in `status` (bounded by a count of passes, never by time). */
  async function until(w: SettlementWorker, id: string, status: SettlementPayment["status"], passes = 20): Promise<SettlementPayment> {
    for (let i = 0; i < passes; i++) {
      const p = await get(id);
      if (p.status === status) return p;
      await w.runOnce();
    }
    const p = await get(id);
    expect(p.status, `payment ${id}`).to.equal(status);
    return p;
  }

  it("pays the counterparty once the transfer is deep enough, with the stored signed bytes", async () => {
    const wallet = await hotWallet();
    const rail = createEvmRail(settings(), wallet);
    const w = worker(rail);
    const to = recipient();
    const id = await accept(wallet, to, 125);
    await w.runOnce();
    const submitted = await get(id);
    expect(submitted.status).to.equal("submitted");
    expect(submitted.txHash).to.match(/^0x[0-9a-f]{64}$/);
    expect(submitted.nonce).to.equal(0);
    const done = await until(w, id, "submitted", 1).then(async () => {
      await anvil.mine(1);
      return until(w, id, "completed");
    });
    expect(done.confirmations).to.be.at.least(2);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(1_250_000n);
    const [stored] = await queue.store.transactions(id);
    const onChain = await anvil.client.getTransaction({ hash: done.txHash as Hex });
    expect(onChain.hash).to.equal(stored!.txHash);
    expect(onChain.nonce).to.equal(0);
  });

  it("sends the same signed bytes again after the first broadcast never arrived (restart), and pays once", async () => {
    const wallet = await hotWallet();
    const proxy = await startRpcProxy(anvil.url);
    try {
      proxy.mode = "stall-send";
      const first = worker(createEvmRail(settings(proxy.url), wallet));
      const to = recipient();
      const id = await accept(wallet, to, 300);
      await first.runOnce(); // signed and stored; the broadcast times out
      const p = await get(id);
      expect(p.status).to.equal("submitted");
      expect(await anvil.client.getTransactionCount({ address: wallet.address })).to.equal(0);
      await first.runOnce(); // still nothing on the chain: a timeout never fails it
      expect((await get(id)).status).to.equal("submitted");
      await first.stop();

      const second = worker(createEvmRail(settings(), wallet));
      await anvil.mine(0);
      await second.runOnce();
      await anvil.mine(1);
      const done = await until(second, id, "completed");
      expect(done.txHash).to.equal(p.txHash);
      const txs = await queue.store.transactions(id);
      expect(txs.map((t) => t.txHash)).to.deep.equal([p.txHash]);
      expect(await anvil.usdcBalance(usdc, to)).to.equal(3_000_000n);
    } finally {
      await proxy.stop();
    }
  });

  it("a node that stops answering leaves the payment submitted, counted as RPC errors, until it answers", async () => {
    const wallet = await hotWallet();
    const proxy = await startRpcProxy(anvil.url);
    try {
      const w = worker(createEvmRail(settings(proxy.url), wallet));
      const id = await accept(wallet, recipient(), 50);
      await w.runOnce();
      expect((await get(id)).status).to.equal("submitted");
      proxy.mode = "stall";
      await anvil.mine(3);
      for (let i = 0; i < 3; i++) await w.runOnce();
      expect((await get(id)).status).to.equal("submitted");
      const metrics = await coreRegistry.getSingleMetricAsString("vaultgate_settlement_rpc_errors_total");
      expect(metrics).to.match(/vaultgate_settlement_rpc_errors_total\{chain="eth",method="eth_blockNumber"\} [1-9]/);
      proxy.mode = "pass";
      await until(w, id, "completed");
    } finally {
      await proxy.stop();
    }
  });

  it("a reorg that removes a completed transfer's block puts it back to submitted, and it completes again, paid once", async () => {
    const wallet = await hotWallet();
    const w = worker(createEvmRail(settings(undefined, { finalityBlocks: 50 }), wallet));
    const to = recipient();
    const id = await accept(wallet, to, 700);
    await w.runOnce();
    await anvil.mine(1);
    const done = await until(w, id, "completed");
    await anvil.setAutomine(false);
    await anvil.rpc("anvil_reorg", [2, []]);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(0n);
    await w.runOnce();
    const back = await get(id);
    expect(back.status).to.equal("submitted");
    expect(back.completedAt).to.equal(null);
    await w.runOnce(); // sends the same bytes again
    await anvil.mine(2);
    const again = await until(w, id, "completed");
    expect(again.txHash).to.equal(done.txHash);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(7_000_000n);
  });

  it("a dropped transfer is sent again with the same bytes; one whose nonce another transaction took fails as dropped", async () => {
    await anvil.setAutomine(false);
    const wallet = await hotWallet();
    const w = worker(createEvmRail(settings(), wallet));
    const to = recipient();
    const id = await accept(wallet, to, 200);
    await w.runOnce();
    const p = await get(id);
    await anvil.rpc("anvil_dropTransaction", [p.txHash]);
    await w.runOnce(); // nothing mined, nonce unused: the same bytes again
    await anvil.mine(3);
    const done = await until(w, id, "completed");
    expect(done.txHash).to.equal(p.txHash);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(2_000_000n);

    const to2 = recipient();
    const id2 = await accept(wallet, to2, 200);
    await w.runOnce();
    const p2 = await get(id2);
    await anvil.rpc("anvil_dropTransaction", [p2.txHash]);
    // Someone else with the key spends the nonce.
    const other = await wallet.signTransaction({
      type: "eip1559",
      chainId: ANVIL_CHAIN_ID,
      nonce: p2.nonce!,
      to: wallet.address,
      value: 0n,
      gas: 21_000n,
      maxFeePerGas: 10n ** 10n,
      maxPriorityFeePerGas: 10n ** 9n,
    });
    await anvil.client.sendRawTransaction({ serializedTransaction: other });
    await anvil.mine(4); // final (finalityBlocks 4): a reorg can no longer take that use back
    const failed = await until(w, id2, "failed");
    expect(failed.failureReason).to.equal("dropped");
    expect(await anvil.usdcBalance(usdc, to2)).to.equal(0n);
  });

  it("a completed transfer a reorg takes back past its expiry is sent again, never cancelled, and paid once", async () => {
    const wallet = await hotWallet();
    const clock = createTestClock();
    const w = worker(createEvmRail(settings(undefined, { finalityBlocks: 50 }), wallet), { clock });
    const to = recipient();
    const id = await accept(wallet, to, 400, clock(), new Date(clock().getTime() + 60_000));
    await w.runOnce();
    await anvil.mine(1);
    const done = await until(w, id, "completed");
    await anvil.setAutomine(false);
    await anvil.rpc("anvil_reorg", [2, []]);
    clock.advance(61_000);
    await w.runOnce();
    expect((await get(id)).status).to.equal("submitted");
    expect((await get(id)).reorgedAt).to.not.equal(null);
    await w.runOnce(); // past its expiry: the same bytes again, no cancellation
    expect((await queue.store.transactions(id)).map((t) => t.kind)).to.deep.equal(["transfer"]);
    await anvil.mine(2);
    const again = await until(w, id, "completed");
    expect(again.txHash).to.equal(done.txHash);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(4_000_000n);
  });

  it("an expired unmined transfer is cancelled with its nonce and fails as expired; the payee gets nothing", async () => {
    await anvil.setAutomine(false);
    const wallet = await hotWallet();
    const clock = createTestClock();
    const w = worker(createEvmRail(settings(), wallet), { clock });
    const to = recipient();
    const id = await accept(wallet, to, 400, clock(), new Date(clock().getTime() + 60_000));
    await w.runOnce();
    const p = await get(id);
    await anvil.rpc("anvil_dropTransaction", [p.txHash]); // stuck somewhere we cannot see
    clock.advance(61_000);
    await w.runOnce(); // signs and sends the cancellation
    const txs = await queue.store.transactions(id);
    expect(txs.map((t) => t.kind)).to.deep.equal(["transfer", "cancel"]);
    await anvil.mine(4); // final (finalityBlocks 4): failing refunds for good
    const failed = await until(w, id, "failed");
    expect(failed.failureReason).to.equal("expired");
    expect(await anvil.usdcBalance(usdc, to)).to.equal(0n);
  });

  it("an unmined transfer is re-signed at higher fees only up to twice what the network asks, then paid once", async () => {
    await anvil.setAutomine(false);
    const wallet = await hotWallet();
    const clock = createTestClock();
    const w = worker(createEvmRail(settings(), wallet), { clock, bumpAfterMs: 120_000 });
    const to = recipient();
    const id = await accept(wallet, to, 700, clock(), new Date(clock().getTime() + 24 * 3600_000));
    await w.runOnce();
    // An hour unmined (the node's mempool never takes it into a block): 30 chances to bump.
    for (let i = 0; i < 30; i++) {
      clock.advance(120_000);
      await w.runOnce();
    }
    const fees = (await queue.store.transactions(id)).map((t) => t.maxFeePerGas);
    expect(fees.length).to.be.within(2, 8);
    expect(fees.at(-1)! * 4n <= fees[0]! * 9n, `${fees}`).to.equal(true); // at most 2.25x the first offer
    await anvil.mine(5);
    const done = await until(w, id, "completed");
    expect(done.txHash).to.equal((await queue.store.transactions(id)).at(-1)!.txHash);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(centsToUnits(700));
  });

  it("a pending payment past its expiry, never signed, fails as expired without touching the chain", async () => {
    const wallet = await hotWallet();
    const clock = createTestClock();
    const w = worker(createEvmRail(settings(), wallet), { clock });
    const id = await accept(wallet, recipient(), 100, clock(), new Date(clock().getTime() + 1000));
    clock.advance(2000);
    await w.runOnce();
    const p = await get(id);
    expect(p.status).to.equal("failed");
    expect(p.failureReason).to.equal("expired");
    expect(p.nonce).to.equal(null);
  });

  it("a reverted transfer fails as reverted", async () => {
    const wallet = await hotWallet();
    const w = worker(createEvmRail(settings(), wallet));
    const id = await accept(wallet, recipient(), 100);
    await anvil.setAutomine(false);
    await w.runOnce(); // signed and sent while the token pays; mined while it reverts every call
    await mineWithTokenCode(anvil, usdc, "0x60006000fd");
    await anvil.mine(1);
    // Deep enough to count, not yet final: a reorg could still take the revert back.
    await w.runOnce();
    expect((await get(id)).status).to.equal("submitted");
    await anvil.mine(2);
    const p = await until(w, id, "failed");
    expect(p.failureReason).to.equal("reverted");
  });

  it("an under-funded hot wallet leaves the payment pending, counted, and it goes out once funded", async () => {
    const wallet = await hotWallet(centsToUnits(100));
    const w = worker(createEvmRail(settings(), wallet));
    const to = recipient();
    const id = await accept(wallet, to, 150);
    await w.runOnce();
    await w.runOnce();
    const p = await get(id);
    expect(p.status).to.equal("pending");
    expect(p.nonce).to.equal(null);
    expect(await coreRegistry.getSingleMetricAsString("vaultgate_settlement_underfunded_total")).to.match(/chain="eth"\} [1-9]/);
    // What the wallet holds, for alerts: its USDC short of the payment, and ETH for gas.
    const gauges = `${await coreRegistry.getSingleMetricAsString("vaultgate_settlement_hot_wallet_balance_usdc")}${await coreRegistry.getSingleMetricAsString("vaultgate_settlement_hot_wallet_gas_eth")}`;
    expect(gauges)
      .to.match(/vaultgate_settlement_hot_wallet_balance_usdc\{chain="eth"\} \d/)
      .and.match(/vaultgate_settlement_hot_wallet_gas_eth\{chain="eth"\} [1-9]/);
    await anvil.mintUsdc(usdc, wallet.address, centsToUnits(100));
    await w.runOnce();
    await anvil.mine(2);
    await until(w, id, "completed");
    expect(await anvil.usdcBalance(usdc, to)).to.equal(1_500_000n);
  });

  it("a payment another worker holds is left alone until its lease runs out, then taken over", async () => {
    const wallet = await hotWallet();
    const rail = createEvmRail(settings(), wallet);
    const id = await accept(wallet, recipient(), 100);
    const now = new Date();
    // A worker claims it and dies holding the lease.
    const held = await queue.store.claim([{ chain: "eth", wallet: rail.wallet }], now, new Date(now.getTime() + 60_000), 10);
    expect(held.map((p) => p.paymentId)).to.deep.equal([id]);
    const clock = createTestClock(now);
    const w = worker(rail, { clock });
    expect(await w.runOnce()).to.equal(0);
    expect((await get(id)).status).to.equal("pending");
    clock.advance(61_000);
    expect(await w.runOnce()).to.equal(1);
    expect((await get(id)).status).to.equal("submitted");
  });

  it("many payments from one wallet through several workers at once: one nonce each, contiguous, each payee paid once (PostgreSQL)", async function () {
    requirePostgres(this, "several workers need several connections");
    const wallet = await hotWallet();
    const payees = Array.from({ length: 40 }, () => recipient());
    const ids = await Promise.all(payees.map((to, i) => accept(wallet, to, 10 + i)));
    const ws = Array.from({ length: 4 }, () => worker(createEvmRail(settings(), wallet), { batchSize: 7 }));
    for (let round = 0; round < 40; round++) {
      await Promise.all(ws.map((w) => w.runOnce()));
      await anvil.mine(1);
      const rows = await Promise.all(ids.map(get));
      if (rows.every((p) => p.status === "completed")) break;
    }
    const rows = await Promise.all(ids.map(get));
    expect(rows.map((p) => p.status)).to.deep.equal(ids.map(() => "completed"));
    expect(rows.map((p) => p.nonce).sort((a, b) => a! - b!)).to.deep.equal(ids.map((_, i) => i));
    const balances = await Promise.all(payees.map((to) => anvil.usdcBalance(usdc, to)));
    expect(balances).to.deep.equal(payees.map((_, i) => centsToUnits(10 + i)));
    expect(await anvil.client.getTransactionCount({ address: wallet.address })).to.equal(40);
  });
});
