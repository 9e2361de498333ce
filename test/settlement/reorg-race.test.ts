import { expect } from "chai";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { SettlementHooks } from "../../core/settlement/worker.js";
import { createTestClock } from "../support/clock.js";
import { evmChainSettings, freshAddress, freshHotWallet } from "../support/evm-rail.js";
import { chainQueueSuite, queuePayment, railWorker } from "../support/settlement-queue.js";

/** Completed payments a reorg takes back past their expiry, with several workers at once on one queue. */
describe("reorged completed payments under several workers (anvil)", function () {
  this.timeout(180_000);
  const suite = chainQueueSuite({ postgresOnly: "several workers need several connections" });
  const { queue, workers } = suite;

  it("each is sent again, fee-bumped but never cancelled, by one worker at a time: paid once, completed again once (PostgreSQL)", async () => {
    const { anvil, usdc } = suite;
    const { account, wallet } = await freshHotWallet(anvil, usdc, 100_000);
    const clock = createTestClock();
    const calls: string[] = [];
    const count = (kind: string) => async (_trx: unknown, p: { paymentId: string }) => void calls.push(`${kind}:${p.paymentId}`);
    const hooks: SettlementHooks = { completed: count("completed"), failed: count("failed"), reorged: count("reorged") };
    const settings = evmChainSettings(anvil.url, usdc, { chain: "eth", finalityBlocks: 50, rpcTimeoutMs: 5_000 });
    for (let i = 0; i < 4; i++) workers.push(railWorker(queue.store, createEvmRail(settings, account), { clock, hooks, batchSize: 5 }));
    const payees = Array.from({ length: 12 }, () => freshAddress());
    const expiresAt = new Date(clock().getTime() + 60_000);
    const ids = await Promise.all(payees.map((to, i) => queuePayment(queue, { chain: "eth", wallet, to, amountCents: 100 + i, at: clock(), expiresAt })));
    const rows = () => Promise.all(ids.map(async (id) => (await queue.store.get(queue.db, id))!));
    const settle = async () => {
      for (let round = 0; round < 30 && !(await rows()).every((p) => p.status === "completed"); round++) {
        await Promise.all(workers.map((w) => w.runOnce()));
        await anvil.mine(1);
      }
      expect((await rows()).map((p) => p.status)).to.deep.equal(ids.map(() => "completed"));
    };

    await settle();
    const first = Math.min(...(await rows()).map((p) => p.minedBlock!));
    await anvil.setAutomine(false);
    try {
      const head = Number(await anvil.client.getBlockNumber({ cacheTime: 0 }));
      await anvil.rpc("anvil_reorg", [head - first + 1, []]);
      clock.advance(130_000); // past every expiry, and due for a fee bump
      for (let round = 0; round < 3; round++) await Promise.all(workers.map((w) => w.runOnce()));
      expect((await rows()).map((p) => p.reorgedAt !== null)).to.deep.equal(ids.map(() => true));
      await settle();
    } finally {
      await anvil.setAutomine(true);
    }

    const kinds = await Promise.all(ids.map(async (id) => [...new Set((await queue.store.transactions(id)).map((t) => t.kind))]));
    expect(kinds, "no payment was cancelled").to.deep.equal(ids.map(() => ["transfer"]));
    const bumped = await Promise.all(ids.map(async (id) => (await queue.store.transactions(id)).length));
    expect(
      bumped.some((n) => n > 1),
      "a reorged transfer is bumped as any unmined one",
    ).to.equal(true);
    const balances = await Promise.all(payees.map((to) => anvil.usdcBalance(usdc, to)));
    expect(balances).to.deep.equal(payees.map((_, i) => centsToUnits(100 + i)));
    expect(await anvil.client.getTransactionCount({ address: account.address })).to.equal(ids.length);
    const times = (kind: string) => ids.map((id) => calls.filter((c) => c === `${kind}:${id}`).length);
    expect(times("reorged"), "each reorg recorded once").to.deep.equal(ids.map(() => 1));
    expect(times("completed"), "completed once before the reorg and once after").to.deep.equal(ids.map(() => 2));
    expect(times("failed")).to.deep.equal(ids.map(() => 0));
  });
});
