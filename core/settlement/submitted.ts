import type { Logger } from "pino";
import { CANCEL_GAS, TRANSFER_GAS, type EvmRail, type Fees } from "./evm-rail.js";
import { nonceTakenBy } from "./nonces.js";
import type { createRailPicker } from "./rails.js";
import type { SettlementPayment, SettlementStatus } from "./records.js";
import { centsToUnits } from "./rules.js";
import type { SettlementStore, TransitionFields, TransitionHook } from "./store.js";

/** What the submitted-payment step takes from the worker that runs it. */
export interface SubmittedStep {
  store: SettlementStore;
  logger: Logger;
  clock: () => Date;
  later: (ms: number) => Date;
  recheckMs: number;
  bumpAfterMs: number;
  picker: ReturnType<typeof createRailPicker>;
  /** The worker's recorded transition (undefined: the lease passed to another worker). */
  move: (p: SettlementPayment, to: SettlementStatus, fields: TransitionFields, hook?: TransitionHook) => Promise<SettlementPayment | undefined>;
  /** A replacement's fees (undefined: over the fee cap, or at the bump ceiling when `ceiling`). */
  bumped: (rail: EvmRail, last: Fees | undefined, ceiling: boolean, p: SettlementPayment) => Promise<Fees | undefined>;
  /** The books' hooks, run in the transaction that records the status. */
  hooks: { completed?: TransitionHook; failed?: TransitionHook };
}

/** Submitted: reconcile by the stored hashes; never fail on a guess. */
export async function reconcileSubmitted(step: SubmittedStep, rail: EvmRail, p: SettlementPayment): Promise<Date | undefined> {
  const { store, logger, clock, later, recheckMs, bumpAfterMs, picker, move, bumped, hooks } = step;
  const resend = (last: { rawTx: string } | undefined) => resendLast(step, rail, last);
  // The nonce is read before the receipts: a nonce used and no receipt of ours, read in
  // that order, means another transaction used it. Failing refunds, so only a final
  // block counts: a reorg can still take back a shallower use (and with it our receipt).
  const head = await rail.blockNumber();
  const finalBlock = Math.max(0, head - rail.settings.finalityBlocks + 1);
  const minedNonce = await rail.minedNonce(finalBlock);
  const txs = await store.transactions(p.paymentId);
  for (const tx of txs) {
    const receipt = await rail.receipt(tx.txHash);
    if (!receipt) continue;
    const depth = head - receipt.blockNumber + 1;
    const at = { confirmations: Math.max(0, depth), minedBlock: receipt.blockNumber, minedBlockHash: receipt.blockHash };
    if (depth < rail.settings.confirmations) {
      await move(p, "submitted", tx.kind === "transfer" ? { ...at, txHash: tx.txHash } : at);
      return later(recheckMs);
    }
    // A token may answer false instead of reverting: only its Transfer log shows the payee was paid.
    const paid = receipt.transfers.some((t) => t.from === rail.wallet && t.to === p.recipient && t.units === centsToUnits(p.amountCents));
    if (tx.kind === "transfer" && receipt.success && !paid) {
      logger.warn({ paymentId: p.paymentId, chain: p.chain, txHash: tx.txHash }, "transfer mined without moving the USDC it names; it fails as reverted");
    }
    if (tx.kind === "transfer" && receipt.success && paid) {
      await move(p, "completed", { ...at, txHash: tx.txHash, completedAt: clock(), final: depth >= rail.settings.finalityBlocks }, hooks.completed);
      return later(recheckMs);
    }
    // Failing refunds for good, so a mined revert or cancel waits for a block no reorg takes back.
    if (depth < rail.settings.finalityBlocks) {
      await move(p, "submitted", tx.kind === "transfer" ? { ...at, txHash: tx.txHash } : at);
      return later(recheckMs);
    }
    await move(p, "failed", { ...at, failureReason: tx.kind === "cancel" ? "expired" : "reverted", final: true }, hooks.failed);
    return undefined;
  }
  if (p.minedBlock !== null) await move(p, "submitted", { confirmations: 0, minedBlock: null, minedBlockHash: null });
  if (minedNonce > p.nonce!) {
    // The evidence is the block that used the nonce: a node without a transaction index names no receipt, even of ours.
    const taker = await nonceTakenBy(rail, p.nonce!, finalBlock);
    if (taker === undefined) throw new Error(`the block that used nonce ${p.nonce} holds no transaction of the hot wallet with it`);
    if (txs.some((t) => t.txHash.toLowerCase() === taker.hash)) {
      logger.warn(
        { paymentId: p.paymentId, chain: p.chain, txHash: taker.hash },
        "the node gives no receipt for a mined transfer; it stays submitted until it does",
      );
      return later(recheckMs);
    }
    // A node switched to another network shows its own use of our nonces: only this chain's may refund. One
    // answering for two networks at once passes the chain-id check; the transaction names the network it was signed for.
    if (taker.chainId !== rail.settings.chainId) {
      logger.error(
        { paymentId: p.paymentId, chain: p.chain, txHash: taker.hash, chainId: taker.chainId, expected: rail.settings.chainId },
        "the transaction that used this payment's nonce was signed for another network; the payment stays submitted",
      );
      return later(recheckMs);
    }
    if (!(await picker.stillOnItsNetwork(rail, p, "the payment stays submitted"))) return later(recheckMs);
    await move(p, "failed", { failureReason: "dropped", final: true }, hooks.failed);
    return undefined;
  }
  const last = txs[txs.length - 1];
  const lastFees = last ? { maxFeePerGas: last.maxFeePerGas, priorityFee: last.priorityFee } : undefined;
  const cancelled = txs.some((t) => t.kind === "cancel");
  const now = clock();
  // Its payee was told it completed: a reorged transfer goes out again (bumped as any), never cancelled.
  const expired = !cancelled && !p.reorgedAt && now >= p.expiresAt;
  // Watched (its key replaced): nothing can be signed here, so its bytes are sent again; only a core with its key cancels.
  if (!rail.signs) {
    if (expired) {
      logger.warn(
        { paymentId: p.paymentId, chain: p.chain, wallet: p.wallet, nonce: p.nonce },
        "signed payment past its expiry, of a hot wallet this core holds no key for",
      );
    }
    return resend(last);
  }
  if (expired) {
    const fees = await bumped(rail, lastFees, false, p);
    if (!fees) return resend(last);
    const signed = { ...(await rail.signCancel(p.nonce!, fees)), ...fees, kind: "cancel" as const, createdAt: now };
    if (!(await store.addTransaction(p, signed))) return undefined;
    logger.info(
      { paymentId: p.paymentId, chain: p.chain, nonce: p.nonce, txHash: signed.txHash },
      "settlement expired unmined; cancelling with the same nonce",
    );
    await rail.broadcast(signed.rawTx);
    return later(recheckMs);
  }
  // A node refuses a replacement the wallet's gas cannot pay; signed, it would become the bytes
  // sent again in place of an offer the wallet can pay. So none is signed until the gas covers it.
  const due = last && now.getTime() - last.createdAt.getTime() >= bumpAfterMs;
  const offer = due ? await bumped(rail, lastFees, true, p) : undefined;
  const fees = offer && (await rail.gasBalance(head)) >= (cancelled ? CANCEL_GAS : TRANSFER_GAS) * offer.maxFeePerGas ? offer : undefined;
  if (fees) {
    const kind = cancelled ? "cancel" : "transfer";
    const s = kind === "cancel" ? await rail.signCancel(p.nonce!, fees) : await rail.signTransfer(p.nonce!, p.recipient, centsToUnits(p.amountCents), fees);
    const signed = { ...s, ...fees, kind, createdAt: now } as const;
    if (!(await store.addTransaction(p, signed))) return undefined;
    logger.info({ paymentId: p.paymentId, chain: p.chain, nonce: p.nonce, txHash: signed.txHash }, "settlement unmined; fee bumped with the same nonce");
    await rail.broadcast(signed.rawTx);
    return later(recheckMs);
  }
  return resend(last);
}

/** Sends the latest bytes again (a restarted or dropped-from-mempool transfer), to be looked at again later. */
async function resendLast(step: SubmittedStep, rail: EvmRail, last: { rawTx: string } | undefined): Promise<Date> {
  if (last) await rail.broadcast(last.rawTx);
  return step.later(step.recheckMs);
}
