import type { Logger } from "pino";
import { pollLoop } from "../../lib/poll-loop.js";
import { refusedForGas, TRANSFER_GAS, type EvmRail, type Fees } from "./evm-rail.js";
import { formatEther, formatGwei } from "viem";
import { atBumpCeiling, replacementFees } from "./fees.js";
import { createElsewhereWalk } from "./elsewhere.js";
import { createMinedCountCheck } from "./nonces.js";
import { createRailPicker } from "./rails.js";
import { reconcileSubmitted, type SubmittedStep } from "./submitted.js";
import { createWalletGauges } from "./wallet-gauges.js";
import {
  hotWalletBalance,
  hotWalletGas,
  settlementAcceptToCompleted,
  settlementFeeOverCap,
  settlementHeld,
  settlementNoGas,
  settlementTransitions,
  settlementUnderfunded,
} from "./metrics.js";
import { centsToUnits, formatUsdc } from "./rules.js";
import type { SettlementPayment, SettlementStatus } from "./records.js";
import type { SettlementStore, SignCheck, TransitionFields, TransitionHook } from "./store.js";

/** What the books do when a payment's status changes (core/budgets): run in the transaction that changes it. */
export interface SettlementHooks {
  /** Signed, its hash stored (nothing sent yet). */
  submitted?: TransitionHook;
  completed?: TransitionHook;
  failed?: TransitionHook;
  /** A reorg removed the block of a completed transfer: it is submitted again. */
  reorged?: TransitionHook;
  /** Asked before an unsigned payment is signed: `stop` cancels it (failed, `cancelled`, refunded), `hold` leaves it unsigned for now. */
  signCheck?: SignCheck;
}

export interface SettlementWorkerOptions {
  store: SettlementStore;
  /** The chains on the evm rail this worker serves (only those whose node answered with the right chain id). */
  rails: () => Map<string, EvmRail>;
  clock: () => Date;
  logger: Logger;
  hooks?: SettlementHooks;
  /** How often the loop looks for due payments; 0 = no loop (call runOnce). */
  pollMs: number;
  /** How long a worker holds the payments it claimed; must exceed a few RPC timeouts. */
  leaseMs?: number;
  /** Payments claimed per pass. */
  batchSize?: number;
  /** When a submitted payment not yet deep enough is looked at again. */
  recheckMs?: number;
  /** A transfer still unmined this long after it was signed is signed again with a higher fee (same nonce). */
  bumpAfterMs?: number;
  /** When a payment the hot wallet could not cover is tried again. */
  underfundedRetryMs?: number;
  /** How often a pass reads each hot wallet's gas and USDC for the gauges, whatever is queued. */
  walletReadMs?: number;
}

export interface SettlementWorker {
  /** One pass: claims due payments and moves each as far as it can; resolves with how many it handled. */
  runOnce(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * Settles evm-rail payments as leased work shared by every replica (docs/settlement.md). Signed
 * bytes are stored before broadcast and a payment is reconciled only by its stored hashes, so an
 * error or restart never double-pays; it fails only on evidence, and a reorg puts it back to submitted.
 */
export function createSettlementWorker(options: SettlementWorkerOptions): SettlementWorker {
  const { store, logger, clock } = options;
  const leaseMs = options.leaseMs ?? 60_000;
  const batchSize = options.batchSize ?? 64;
  const recheckMs = options.recheckMs ?? 4_000;
  const bumpAfterMs = options.bumpAfterMs ?? 120_000;
  const underfundedRetryMs = options.underfundedRetryMs ?? 30_000;
  const walletReadMs = options.walletReadMs ?? 30_000;
  const hooks = options.hooks ?? {};
  const later = (ms: number) => new Date(clock().getTime() + ms);
  const picker = createRailPicker(logger);
  const minedCountIsOurs = createMinedCountCheck();

  async function move(p: SettlementPayment, to: SettlementStatus, fields: TransitionFields, hook?: TransitionHook) {
    const now = clock();
    const moved = await store.transition(p, p.status, to, now, fields, hook);
    if (!moved) {
      logger.warn({ paymentId: p.paymentId }, "settlement lease passed to another worker; result not recorded");
      return undefined;
    }
    if (to !== p.status) {
      settlementTransitions.inc({ chain: p.chain, status: to });
      logger.info(
        { paymentId: p.paymentId, chain: p.chain, from: p.status, to, txHash: moved.txHash, reason: moved.failureReason ?? undefined },
        "settlement status changed",
      );
      if (to === "completed") settlementAcceptToCompleted.observe({ chain: p.chain }, (now.getTime() - p.createdAt.getTime()) / 1000);
    }
    return moved;
  }

  /** A replacement's fees; undefined when over the chain's fee cap, or at the bump ceiling and `ceiling` holds (a cancellation's does not). */
  async function bumped(rail: EvmRail, last: Fees | undefined, ceiling: boolean, p: SettlementPayment): Promise<Fees | undefined> {
    const network = await rail.fees();
    if (last && ceiling && atBumpCeiling(last, network)) return undefined;
    return withinCap(rail, last ? replacementFees(network, last) : network, p);
  }

  /** The fees, unless they pass the chain's CHAIN_<NAME>_MAX_FEE_GWEI: then nothing is signed until the node asks less. */
  function withinCap(rail: EvmRail, fees: Fees, p: SettlementPayment): Fees | undefined {
    const cap = rail.settings.maxFeePerGas;
    if (cap === undefined || fees.maxFeePerGas <= cap) return fees;
    settlementFeeOverCap.inc({ chain: p.chain });
    logger.warn(
      { paymentId: p.paymentId, chain: p.chain, feeGwei: formatGwei(fees.maxFeePerGas), capGwei: formatGwei(cap) },
      "fee per gas over the cap; nothing signed",
    );
    return undefined;
  }

  /** Expired before it had a nonce: nothing was signed, so it fails without asking the node. */
  async function expire(p: SettlementPayment): Promise<undefined> {
    await move(p, "failed", { failureReason: "expired" }, hooks.failed);
    return undefined;
  }

  /** Stopped (its budget ended, its grant revoked) before anything was signed: it fails without asking the node, refunded. */
  async function cancel(p: SettlementPayment): Promise<undefined> {
    await move(p, "failed", { failureReason: "cancelled" }, hooks.failed);
    return undefined;
  }

  /** Held (its user's account not active): nothing is signed; looked at again, until it may be signed or expires. */
  function held(p: SettlementPayment): Date {
    logger.info({ paymentId: p.paymentId, chain: p.chain }, "payment held: its user's account is not active; nothing signed");
    settlementHeld.inc({ chain: p.chain });
    return later(underfundedRetryMs);
  }

  /** Pending: expired or cancelled before it had a nonce -> failed; else nonce, sign, store, broadcast. */
  async function pending(rail: EvmRail, p: SettlementPayment): Promise<Date | undefined> {
    if (p.nonce === null && clock() >= p.expiresAt) return expire(p);
    const verdict = p.nonce === null ? (await hooks.signCheck?.([p]))?.get(p.paymentId) : undefined;
    if (verdict === "stop") return cancel(p);
    if (verdict === "hold") return held(p);
    // Balance and mined nonce at one block: payments whose nonce that block has not used are what the balance still holds.
    const at = await rail.blockNumber();
    const [balanceUnits, chainNonce, fees, gasWei] = await Promise.all([
      rail.usdcBalance(undefined, at),
      rail.minedNonce(at),
      rail.fees(),
      rail.gasBalance(at),
    ]);
    hotWalletBalance.set({ chain: p.chain }, Number(formatUsdc(balanceUnits)));
    hotWalletGas.set({ chain: p.chain }, Number(formatEther(gasWei)));
    if (!withinCap(rail, fees, p)) return later(recheckMs);
    if (p.nonce === null && !(await minedCountIsOurs(rail, chainNonce, await store.nextNonce(p.chain, p.wallet), at))) {
      logger.error(
        { paymentId: p.paymentId, chain: p.chain, wallet: rail.wallet, minedNonce: chainNonce, expected: rail.settings.chainId },
        "the node counts hot wallet transactions signed for another network; the payment stays pending, unsigned",
      );
      return later(recheckMs);
    }
    // Sent, a transfer the token refuses (a payee it blocks, a pause) reverts at the hot wallet's gas. Covered by the
    // balance, a refusal is not for want of funds, so it fails now, unsigned: an agent cannot make the platform burn gas.
    const refused = balanceUnits >= centsToUnits(p.amountCents) && (await rail.transferRefused(p.recipient, centsToUnits(p.amountCents), at));
    if (!(await picker.stillOnItsNetwork(rail, p, "the payment stays pending, unsigned"))) return later(recheckMs);
    if (refused) {
      logger.warn({ paymentId: p.paymentId, chain: p.chain }, "the token refuses this transfer; it fails as reverted, unsigned and never sent");
      await move(p, "failed", { failureReason: "reverted" }, hooks.failed);
      return undefined;
    }
    const result = await store.submit(
      p,
      clock(),
      { balanceUnits, chainNonce, unitsOf: centsToUnits, gasWei, gasPerTransferWei: TRANSFER_GAS * fees.maxFeePerGas },
      (nonce) => rail.signTransfer(nonce, p.recipient, centsToUnits(p.amountCents), fees).then((s) => ({ ...s, ...fees })),
      { hook: hooks.submitted, check: hooks.signCheck },
    );
    if (result.kind === "lost") return undefined;
    if (result.kind === "stopped") return cancel(p);
    if (result.kind === "held") return held(p);
    if (result.kind === "underfunded") {
      settlementUnderfunded.inc({ chain: p.chain });
      logger.warn(
        { paymentId: p.paymentId, chain: p.chain, wallet: rail.wallet, amountCents: p.amountCents, availableUsdc: formatUsdc(result.availableUnits) },
        "hot wallet cannot cover this payment; it stays pending until the wallet is funded",
      );
      return later(underfundedRetryMs);
    }
    if (result.kind === "no_gas") {
      settlementNoGas.inc({ chain: p.chain });
      logger.warn(
        { paymentId: p.paymentId, chain: p.chain, wallet: rail.wallet, gasEth: formatEther(gasWei), neededEth: formatEther(result.neededWei) },
        "hot wallet has no ETH for gas to send this payment; it stays pending, unsigned, until the wallet has gas or the payment expires",
      );
      return later(underfundedRetryMs);
    }
    settlementTransitions.inc({ chain: p.chain, status: "submitted" });
    logger.info({ paymentId: p.paymentId, chain: p.chain, nonce: result.payment.nonce, txHash: result.signed.txHash }, "settlement status changed");
    // A failed send leaves the payment submitted: the next look sends the same bytes again.
    await rail.broadcast(result.signed.rawTx);
    return later(recheckMs);
  }

  const step: SubmittedStep = { store, logger, clock, later, recheckMs, bumpAfterMs, picker, move, bumped, hooks };

  /** Completed and not yet final: watch for a reorg that removes its block. */
  async function completed(rail: EvmRail, p: SettlementPayment): Promise<Date | undefined> {
    const head = await rail.blockNumber();
    const receipt = await rail.receipt(p.txHash!);
    // A block is its hash: while the chain has it at its height the transfer is in it, whatever a receipt lookup says.
    // No block at that height (a replica behind the head) is no evidence either way: look again later.
    const atHeight = receipt ? receipt.blockHash : await rail.blockHash(p.minedBlock!);
    if (atHeight === undefined) return later(recheckMs);
    const kept = atHeight === p.minedBlockHash;
    if (!kept) {
      // Another network's block at that height is no reorg of ours.
      if (!(await picker.stillOnItsNetwork(rail, p, "the payment stays completed"))) return later(recheckMs);
      logger.warn({ paymentId: p.paymentId, chain: p.chain, txHash: p.txHash }, "reorg removed a completed transfer's block; the payment is submitted again");
      await move(p, "submitted", { confirmations: 0, minedBlock: null, minedBlockHash: null, completedAt: null, reorgedAt: clock() }, hooks.reorged);
      return later(0);
    }
    const depth = head - p.minedBlock! + 1;
    // A head below the transfer's own block is a replica behind the chain: no depth to record, look again later.
    if (depth < 1) return later(recheckMs);
    await move(p, "completed", { confirmations: depth, final: depth >= rail.settings.finalityBlocks });
    return depth >= rail.settings.finalityBlocks ? undefined : later(recheckMs);
  }

  /**
   * `rail` undefined: no core here pays from its wallet, or its node answers for another network. An unsigned one only
   * expires, or is cancelled once `stopped`; a signed one waits, since only its own chain's evidence may end it.
   */
  async function handle(rail: EvmRail | undefined, claimed: SettlementPayment, stopped = false): Promise<void> {
    let next: Date | undefined = later(recheckMs);
    let p = claimed;
    try {
      // Unsigned, a retired hot wallet's payment is handed to the chain's current one (lease passed on: left alone).
      if (rail && p.nonce === null && p.wallet !== rail.wallet) {
        const moved = await store.rehome(p, rail.wallet, clock());
        if (!moved) return;
        logger.info({ paymentId: p.paymentId, chain: p.chain, from: p.wallet, to: rail.wallet }, "unsigned payment moves from a retired hot wallet");
        p = moved;
      }
      if (!rail) next = p.nonce !== null ? later(recheckMs) : clock() >= p.expiresAt ? await expire(p) : stopped ? await cancel(p) : later(recheckMs);
      else if (p.status === "pending") next = await pending(rail, p);
      else if (p.status === "submitted") next = await reconcileSubmitted(step, rail, p);
      else if (p.status === "completed") next = await completed(rail, p);
    } catch (err) {
      if (rail && refusedForGas(err)) {
        settlementNoGas.inc({ chain: p.chain });
        const overdueMs = clock().getTime() - p.expiresAt.getTime();
        if (p.nonce !== null && overdueMs >= 0 && !p.reorgedAt) {
          logger.warn(
            { paymentId: p.paymentId, chain: p.chain, wallet: rail.wallet, nonce: p.nonce, overdueSeconds: Math.floor(overdueMs / 1000) },
            `chain ${p.chain}: a signed payment is past its expiry and the hot wallet has no ETH for gas to cancel it; it stays submitted, its nonce holding back every later payment of this wallet, until the wallet has gas`,
          );
        } else {
          logger.warn(
            { paymentId: p.paymentId, chain: p.chain, wallet: rail.wallet },
            "the node refused the send: the hot wallet has no ETH for gas; the same bytes are sent again once it has",
          );
        }
      } else {
        logger.warn(
          { paymentId: p.paymentId, chain: p.chain, err: { name: (err as Error).name, message: (err as Error).message.split("\n")[0] } },
          "settlement step failed; it is tried again",
        );
      }
      next = later(recheckMs);
    }
    // A payment that reached an end (failed, or final) is out of the queue already; give back the rest.
    await store.release(p, next ?? clock()).catch((err: unknown) => logger.error({ err }, "settlement lease release failed"));
  }

  async function pass(): Promise<number> {
    if (loop.stopped) return 0;
    const rails = options.rails();
    const now = clock();
    const reads = [...rails.values()].map((r) => readWallet(r, now));
    const served = [...rails.values()].map((r) => ({ chain: r.settings.chain, wallet: r.wallet }));
    const watched = [...rails.values()].flatMap((r) => (r.settings.retiredWallets ?? []).map((wallet) => ({ chain: r.settings.chain, wallet })));
    const leaseUntil = new Date(now.getTime() + leaseMs);
    const claimed = await store.claim(served, now, leaseUntil, batchSize, { watched });
    // Unsigned, of a wallet this core does not serve (node not answering, key replaced, sandbox rail): expired, or stopped.
    const expired = await store.claim(served, now, leaseUntil, batchSize, { expiredUnsignedExcept: true });
    const stopped = await stoppedElsewhere([...served, ...watched], now, leaseUntil);
    const railOf = await picker.pick(rails, claimed);
    await Promise.all([
      ...claimed.map((p, i) => handle(railOf[i], p)),
      ...expired.map((p) => handle(undefined, p)),
      ...stopped.map((p) => handle(undefined, p, true)),
    ]);
    await Promise.all(reads);
    return claimed.length + expired.length + stopped.length;
  }

  const readWallet = createWalletGauges({ logger, everyMs: walletReadMs });
  const stoppedElsewhere = createElsewhereWalk({ store, check: hooks.signCheck, pageSize: batchSize, everyMs: recheckMs });
  const loop = pollLoop({ intervalMs: options.pollMs, pass, onError: (err) => logger.error({ err }, "settlement pass failed") });

  return {
    runOnce: () => pass(),
    stop: () => loop.stop(),
  };
}
