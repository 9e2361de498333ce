import { expect } from "chai";
import type { Hex } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { SettlementHooks } from "../../core/settlement/worker.js";
import { ANVIL_CHAIN_ID, startRpcProxy, type Anvil } from "../support/anvil.js";
import { createTestClock } from "../support/clock.js";
import { evmChainSettings, freshAddress, freshHotWallet, fundHotWallet, startAnvilWithUsdc } from "../support/evm-rail.js";
import { createCapturedLogger } from "../support/logs.js";
import { chainQueueSuite, queuePayment, railWorker } from "../support/settlement-queue.js";

const OTHER_CHAIN_ID = 999;

/** A 0-value self-send of `account` with `nonce`, signed for `chainId` (undefined: a legacy one signed for no chain). */
function selfSend(account: PrivateKeyAccount, nonce: number, chainId: number | undefined): Promise<Hex> {
  const base = { nonce, to: account.address, value: 0n, gas: 21_000n };
  if (chainId === undefined) return account.signTransaction({ ...base, type: "legacy", gasPrice: 10n ** 12n });
  // Far above what the node asks: the payment's own bytes, sent again, cannot replace it.
  return account.signTransaction({ ...base, type: "eip1559", chainId, maxFeePerGas: 10n ** 12n, maxPriorityFeePerGas: 10n ** 11n });
}

/**
 * A node answering for two networks passes every chain-id question, so racing workers see the hot wallet's
 * nonces used by another network's transactions: none of that refunds. Only a use signed for our chain is evidence.
 */
describe("a switched node's other-network nonces under several workers (anvil)", function () {
  this.timeout(240_000);
  const suite = chainQueueSuite({ postgresOnly: "several workers need several connections" });
  const { queue, workers } = suite;
  let other: Anvil | undefined;
  after(async () => {
    await other?.stop();
  });

  it("none is failed or refunded, nor signed past our nonces, while switched; back, each is paid once, and only our network's other use fails, once (PostgreSQL)", async () => {
    const { anvil, usdc } = suite;
    const { account, wallet } = await freshHotWallet(anvil, usdc, 100_000);
    const proxy = await startRpcProxy(anvil.url);
    try {
      const clock = createTestClock(); // never due for a fee bump or an expiry
      const calls: string[] = [];
      const count = (kind: string) => async (_trx: unknown, p: { paymentId: string }) => void calls.push(`${kind}:${p.paymentId}`);
      const hooks: SettlementHooks = { completed: count("completed"), failed: count("failed"), reorged: count("reorged") };
      const log = createCapturedLogger("info");
      const settings = evmChainSettings(proxy.url, usdc, { chain: "eth", rpcTimeoutMs: 5_000 });
      // A frozen clock ties every payment's next look: 4 x 5 covers all 18 in each round, so none waits behind the others.
      for (let i = 0; i < 4; i++) workers.push(railWorker(queue.store, createEvmRail(settings, account), { clock, hooks, batchSize: 5, logger: log.logger }));
      const race = () => Promise.all(workers.map((w) => w.runOnce()));

      const payees = Array.from({ length: 15 }, () => freshAddress());
      await anvil.setAutomine(false);
      const ids = await Promise.all(payees.map((to, i) => queuePayment(queue, { chain: "eth", wallet, to, amountCents: 100 + i, at: clock() })));
      const rows = () => Promise.all(ids.map(async (id) => (await queue.store.get(queue.db, id))!));
      for (let round = 0; round < 10 && (await rows()).some((p) => p.status !== "submitted"); round++) await race();
      const signed = await rows();
      expect(signed.map((p) => p.status)).to.deep.equal(ids.map(() => "submitted"));
      expect(signed.map((p) => p.nonce).sort((a, b) => a! - b!)).to.deep.equal(ids.map((_, i) => i));

      // On our network someone with the key uses three of the nonces, mid-sequence, before their transfers are mined.
      // The pool is filled again in nonce order (a dropped transaction takes the later ones with it).
      const evidence = new Set([2, 7, 12]);
      await anvil.rpc("anvil_dropAllTransactions");
      for (const p of [...signed].sort((a, b) => a.nonce! - b.nonce!)) {
        const raw = evidence.has(p.nonce!)
          ? await selfSend(account, p.nonce!, ANVIL_CHAIN_ID)
          : ((await queue.store.transactions(p.paymentId))[0]!.rawTx as Hex);
        await anvil.client.sendRawTransaction({ serializedTransaction: raw });
      }
      const pool = await anvil.rpc<{ pending: Record<string, Record<string, unknown>> }>("txpool_content");
      const queued = Object.entries(pool.pending).find(([from]) => from.toLowerCase() === wallet)?.[1] ?? {};
      expect(Object.keys(queued)).to.have.length(ids.length);
      // On another network the same key holds USDC and has used every one of them and three more, long since final: most
      // signed for it, two for no chain. Its count, above ours, must sign nothing.
      const elsewhere = await startAnvilWithUsdc();
      other = elsewhere.anvil;
      expect(elsewhere.usdc).to.equal(usdc);
      await fundHotWallet(other, usdc, wallet, centsToUnits(100_000));
      await other.rpc("anvil_setChainId", [OTHER_CHAIN_ID]);
      for (let nonce = 0; nonce < ids.length + 3; nonce++) {
        const tx = await selfSend(account, nonce, nonce % 7 === 3 ? undefined : OTHER_CHAIN_ID);
        await other.client.sendRawTransaction({ serializedTransaction: tx });
      }
      await other.mine(10);
      expect(await other.client.getTransactionCount({ address: account.address })).to.equal(ids.length + 3);

      // The node now answers with the other network's blocks, still reporting our chain id; three more payments come.
      proxy.retarget(other.url, ANVIL_CHAIN_ID);
      const latePayees = [freshAddress(), freshAddress(), freshAddress()];
      const late = await Promise.all(latePayees.map((to) => queuePayment(queue, { chain: "eth", wallet, to, amountCents: 500, at: clock() })));
      const lateRows = () => Promise.all(late.map(async (id) => (await queue.store.get(queue.db, id))!));
      for (let round = 0; round < 5; round++) await race();
      expect(
        (await lateRows()).map((p) => [p.status, p.nonce]),
        "nothing signed past our network's nonces",
      ).to.deep.equal(late.map(() => ["pending", null]));
      const waiting = await rows();
      expect(waiting.map((p) => [p.status, p.failureReason])).to.deep.equal(ids.map(() => ["submitted", null]));
      expect(calls, "nothing completed or refunded on the other network's word").to.deep.equal([]);
      const errors = log
        .text()
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { level: number; msg: string; paymentId?: string; chainId?: number })
        .filter((l) => l.level >= 50);
      const used = errors.filter((l) => /used this payment's nonce was signed for another network/.test(l.msg));
      const named = new Set(used.map((l) => l.paymentId));
      expect([...named].sort(), "each payment's other-network nonce is logged at error").to.deep.equal([...ids].sort());
      const counted = new Set(errors.filter((l) => /counts hot wallet transactions signed for another network/.test(l.msg)).map((l) => l.paymentId));
      expect([...counted].sort(), "each unsigned payment held is logged at error").to.deep.equal([...late].sort());
      const unprotected = new Set(used.filter((l) => l.chainId === undefined).map((l) => l.paymentId));
      expect([...unprotected].sort(), "a use signed for no chain is no evidence either").to.deep.equal(
        signed
          .filter((p) => p.nonce! % 7 === 3)
          .map((p) => p.paymentId)
          .sort(),
      );
      expect(await Promise.all(payees.map((to) => anvil.usdcBalance(usdc, to)))).to.deep.equal(payees.map(() => 0n));

      // Back on our network, the transfers are mined; the three nonces our network used otherwise are the only evidence.
      proxy.retarget(anvil.url);
      const settled = (p: { status: string }) => p.status === "completed" || p.status === "failed";
      for (let round = 0; round < 40 && !(await rows()).concat(await lateRows()).every(settled); round++) {
        await race();
        await anvil.mine(1);
      }
      const done = await rows();
      const dropped = done.map((p) => evidence.has(p.nonce!));
      expect(done.map((p) => [p.status, p.failureReason])).to.deep.equal(dropped.map((d) => (d ? ["failed", "dropped"] : ["completed", null])));
      const times = (kind: string) => ids.map((id) => calls.filter((c) => c === `${kind}:${id}`).length);
      expect(times("completed"), "each completes once").to.deep.equal(dropped.map((d) => (d ? 0 : 1)));
      expect(times("failed"), "each refund made once, only on our network's evidence").to.deep.equal(dropped.map((d) => (d ? 1 : 0)));
      expect(times("reorged")).to.deep.equal(ids.map(() => 0));
      const balances = await Promise.all(payees.map((to) => anvil.usdcBalance(usdc, to)));
      expect(balances, "each payee paid once, and none of the refunded").to.deep.equal(dropped.map((d, i) => (d ? 0n : centsToUnits(100 + i))));
      const lateDone = await lateRows();
      expect(lateDone.map((p) => p.status)).to.deep.equal(late.map(() => "completed"));
      expect(
        lateDone.map((p) => p.nonce).sort((a, b) => a! - b!),
        "the next nonces of our network",
      ).to.deep.equal([15, 16, 17]);
      expect(await Promise.all(latePayees.map((to) => anvil.usdcBalance(usdc, to)))).to.deep.equal(latePayees.map(() => centsToUnits(500)));
      expect(await anvil.client.getTransactionCount({ address: account.address })).to.equal(ids.length + 3);
    } finally {
      await anvil.setAutomine(true);
      await proxy.stop();
    }
  });
});
