import { expect } from "chai";
import type { Hex } from "viem";
import { coreRegistry } from "../../core/observability/metrics.js";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { Anvil } from "../support/anvil.js";
import { createTestClock } from "../support/clock.js";
import { requirePostgres } from "../support/db.js";
import { evmChainSettings, freshAddress, freshHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";
import { ownQueueDatabase, queuePayment, railWorker } from "../support/settlement-queue.js";

const GWEI = 1_000_000_000n;

/** CHAIN_<NAME>_MAX_FEE_GWEI: the hot wallet never signs a transaction offering more per gas; payments wait for fees to fall. */
describe("a cap on the fee per gas (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let usdc: Hex;
  const queue = ownQueueDatabase();

  before(async () => {
    ({ anvil, usdc } = await startAnvilWithUsdc());
  });
  afterEach(async () => {
    await anvil.setAutomine(true);
  });
  after(async () => {
    await anvil?.stop();
  });

  /** The base fee of the next block, mined now (it includes what is pending that can pay it). */
  async function baseFee(gwei: bigint) {
    await anvil.rpc("anvil_setNextBlockBaseFeePerGas", [`0x${(gwei * GWEI).toString(16)}`]);
    await anvil.mine(1);
  }
  const overCap = async () =>
    (await coreRegistry.getSingleMetric("vaultgate_settlement_fee_over_cap_total")!.get()).values.find((v) => v.labels.chain === "op")?.value ?? 0;

  async function capped(maxFeeGwei: bigint, workers = 1) {
    const { account, wallet } = await freshHotWallet(anvil, usdc, 10_000);
    const clock = createTestClock();
    const rail = createEvmRail(evmChainSettings(anvil.url, usdc, { chain: "op", maxFeePerGas: maxFeeGwei * GWEI }), account);
    const ws = Array.from({ length: workers }, () => railWorker(queue.store, rail, { clock, bumpAfterMs: 120_000, batchSize: 5 }));
    return { wallet, clock, w: ws[0]!, ws };
  }

  it("leaves a payment unsigned while the node asks more than the cap, and sends it under the cap once fees fall", async () => {
    const { wallet, clock, w } = await capped(5n);
    try {
      await baseFee(100n);
      const to = freshAddress();
      const id = await queuePayment(queue, { chain: "op", wallet, to, amountCents: 250, at: clock() });
      const before = await overCap();
      await w.runOnce();
      await w.runOnce();
      expect(await queue.store.transactions(id)).to.deep.equal([]);
      expect((await queue.store.get(queue.db, id))!).to.deep.include({ status: "pending", nonce: null });
      expect(await overCap()).to.equal(before + 2);

      await baseFee(1n);
      await w.runOnce();
      const sent = await queue.store.transactions(id);
      expect(sent).to.have.length(1);
      expect(sent[0]!.maxFeePerGas <= 5n * GWEI, "offered under the cap").to.equal(true);
      for (let i = 0; i < 4; i++) {
        await anvil.mine(1);
        await w.runOnce();
      }
      expect((await queue.store.get(queue.db, id))!.status).to.equal("completed");
      expect(await anvil.usdcBalance(usdc, to)).to.equal(centsToUnits(250));
    } finally {
      await w.stop();
    }
  });

  it("signs no fee bump and no cancellation over the cap; once fees fall, the cancellation goes out under it", async () => {
    const { wallet, clock, w } = await capped(5n);
    try {
      await baseFee(1n);
      const to = freshAddress();
      const id = await queuePayment(queue, { chain: "op", wallet, to, amountCents: 300, at: clock(), expiresAt: new Date(clock().getTime() + 300_000) });
      await anvil.setAutomine(false);
      await w.runOnce();
      const [first] = await queue.store.transactions(id);
      await baseFee(100n); // the transfer cannot pay this block's base fee
      clock.advance(120_000);
      await w.runOnce(); // a bump would offer the node's ask, over the cap
      clock.advance(300_000);
      await w.runOnce(); // expired: its cancellation would too
      expect((await queue.store.transactions(id)).map((t) => t.kind)).to.deep.equal(["transfer"]);
      expect((await queue.store.get(queue.db, id))!).to.deep.include({ status: "submitted", txHash: first!.txHash });

      await baseFee(1n);
      await w.runOnce();
      const [, cancel] = await queue.store.transactions(id);
      expect(cancel!.kind).to.equal("cancel");
      expect(cancel!.maxFeePerGas <= 5n * GWEI, "offered under the cap").to.equal(true);
      for (let i = 0; i < 5; i++) {
        await anvil.mine(1);
        await w.runOnce();
      }
      expect((await queue.store.get(queue.db, id))!).to.deep.include({ status: "failed", failureReason: "expired" });
      expect(await anvil.usdcBalance(usdc, to)).to.equal(0n);
    } finally {
      await w.stop();
    }
  });

  it("several workers at once over the cap take no nonce and sign nothing; under it, every payment goes out once, nonces contiguous (PostgreSQL)", async function () {
    requirePostgres(this, "several workers need several connections");
    const { wallet, clock, ws } = await capped(5n, 4);
    try {
      await baseFee(100n);
      const payees = Array.from({ length: 16 }, () => freshAddress());
      const ids = await Promise.all(payees.map((to, i) => queuePayment(queue, { chain: "op", wallet, to, amountCents: 100 + i, at: clock() })));
      const rows = () => Promise.all(ids.map(async (id) => (await queue.store.get(queue.db, id))!));
      for (let round = 0; round < 3; round++) await Promise.all(ws.map((w) => w.runOnce()));
      expect((await rows()).map((p) => [p.status, p.nonce])).to.deep.equal(ids.map(() => ["pending", null]));
      expect(await anvil.client.getTransactionCount({ address: wallet as Hex })).to.equal(0);

      await baseFee(1n);
      for (let round = 0; round < 30 && !(await rows()).every((p) => p.status === "completed"); round++) {
        await Promise.all(ws.map((w) => w.runOnce()));
        await anvil.mine(1);
      }
      const done = await rows();
      expect(done.map((p) => p.status)).to.deep.equal(ids.map(() => "completed"));
      expect(done.map((p) => p.nonce).sort((a, b) => a! - b!)).to.deep.equal(ids.map((_, i) => i));
      const sent = (await Promise.all(ids.map((id) => queue.store.transactions(id)))).flat();
      expect(
        sent.every((t) => t.maxFeePerGas <= 5n * GWEI),
        "every transaction offered under the cap",
      ).to.equal(true);
      expect(await Promise.all(payees.map((to) => anvil.usdcBalance(usdc, to)))).to.deep.equal(payees.map((_, i) => centsToUnits(100 + i)));
      expect(await anvil.client.getTransactionCount({ address: wallet as Hex })).to.equal(ids.length);
    } finally {
      await Promise.all(ws.map((w) => w.stop()));
    }
  });
});
