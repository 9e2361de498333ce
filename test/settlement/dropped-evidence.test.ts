import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Hex } from "viem";
import { privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { SettlementWorker } from "../../core/settlement/worker.js";
import { ANVIL_CHAIN_ID, type Anvil } from "../support/anvil.js";
import { evmChainSettings, startAnvilWithUsdc } from "../support/evm-rail.js";
import { ownQueueDatabase, queuePayment, railWorker } from "../support/settlement-queue.js";

/**
 * A payment fails as dropped only when another transaction used its nonce in a block no
 * reorg takes back: failing refunds the vault, so a use a reorg can undo is no evidence.
 */
describe("settlement: a nonce used by another transaction is evidence only once final", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let usdc: Hex;
  const queue = ownQueueDatabase();
  let w: SettlementWorker | undefined;

  before(async () => {
    ({ anvil, usdc } = await startAnvilWithUsdc());
  });
  after(async () => {
    await w?.stop();
    await anvil?.stop();
  });

  it("a reorg that takes back the other transaction leaves the payment to be sent again and paid, never refunded", async () => {
    await anvil.setAutomine(false);
    const wallet: PrivateKeyAccount = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`);
    await anvil.fundGas(wallet.address);
    await anvil.mine(1);
    await anvil.mintUsdc(usdc, wallet.address, centsToUnits(10_000));
    await anvil.mine(5); // beyond the reach of the reorg below
    const rail = createEvmRail(evmChainSettings(anvil.url, usdc, { chain: "eth", finalityBlocks: 6 }), wallet);
    w = railWorker(queue.store, rail);
    const to = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;
    const id = await queuePayment(queue, { chain: "eth", wallet: wallet.address, to, amountCents: 300 });
    await w.runOnce();
    const signed = (await queue.store.get(queue.db, id))!;
    await anvil.rpc("anvil_dropTransaction", [signed.txHash]);
    // Someone with the key spends the nonce; it is mined two blocks deep, short of finality.
    const other = await wallet.signTransaction({
      type: "eip1559",
      chainId: ANVIL_CHAIN_ID,
      nonce: signed.nonce!,
      to: wallet.address,
      value: 0n,
      gas: 21_000n,
      maxFeePerGas: 10n ** 10n,
      maxPriorityFeePerGas: 10n ** 9n,
    });
    await anvil.client.sendRawTransaction({ serializedTransaction: other });
    await anvil.mine(2);
    await w.runOnce();
    expect((await queue.store.get(queue.db, id))!.status, "a reorg can still take the other use back").to.equal("submitted");

    // It does: the nonce is free again, the stored bytes go out again and are mined.
    await anvil.rpc("anvil_reorg", [3, []]);
    await w.runOnce();
    await anvil.mine(3);
    for (let i = 0; i < 10 && (await queue.store.get(queue.db, id))!.status !== "completed"; i++) await w.runOnce();
    const done = (await queue.store.get(queue.db, id))!;
    expect(done.status, `${done.failureReason}`).to.equal("completed");
    expect(done.txHash).to.equal(signed.txHash);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(centsToUnits(300));
  });
});
