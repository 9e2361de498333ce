import type { Db } from "../db/knex.js";
import { accountTotalCents } from "../ledger/reads.js";
import type { EvmRail, UsdcTransfer } from "./evm-rail.js";
import { hotWalletAccount } from "./ledger.js";
import { centsToUnits } from "./rules.js";

/** Blocks per eth_getLogs call: public nodes refuse wide ranges. */
export const LOG_RANGE = 5_000;

export interface ChainBooks {
  chain: string;
  wallet: string;
  onchainBalanceUnits: string;
  incomingUnits: string;
  outgoingUnits: string;
  ledgerOutflowUnits: string;
  toBlock: bigint;
  fromBlock: bigint;
  openingBalanceUnits: string;
}

export interface ChainDifference {
  chain: string;
  check: string;
  txHash: string;
  paymentId: string;
  chainUnits: string;
  booksUnits: string;
  message: string;
}

interface CompletedPayment {
  payment_id: string;
  mined_block: string | null;
  recipient: string;
  amount_cents: string;
  tx_hash: string | null;
}

/**
 * Books against the chain, per hot wallet (the current one and each retired one): each outgoing transfer is
 * exactly one completed payment, and the ledger account and wallet balance match the Transfer logs. A move
 * between a chain's own wallets (an operator's sweep after a key change) is no payment. Read-only.
 */
export async function verifyChains(db: Db, rails: EvmRail[], options: { fromBlock?: (chain: string) => number | undefined; range?: number } = {}) {
  const chains: ChainBooks[] = [];
  const differences: ChainDifference[] = [];
  const wallets = rails.flatMap((r) => [r, ...(r.settings.retiredWallets ?? []).map((w) => r.watching(w))]);
  const ownWallets = new Map(rails.map((r) => [r.settings.chain, new Set([r.wallet, ...(r.settings.retiredWallets ?? [])])]));
  for (const rail of wallets) {
    const own = ownWallets.get(rail.settings.chain)!;
    const chain = rail.settings.chain;
    const diff = (d: Omit<ChainDifference, "chain">) => differences.push({ chain, ...d });
    const fromBlock = options.fromBlock?.(chain) ?? rail.settings.startBlock ?? 0;
    let toBlock: number;
    let balance: bigint;
    let opening = 0n;
    let logs: UsdcTransfer[] = [];
    try {
      // Another network's logs and balances say nothing of this wallet's: compared, they would pass or fail by chance.
      const reported = await rail.chainId();
      if (reported !== rail.settings.chainId) {
        diff({
          check: "chain_id_mismatch",
          txHash: "",
          paymentId: "",
          chainUnits: "",
          booksUnits: "",
          message: `${chain}: the node reports chain id ${reported} but CHAIN_${chain.toUpperCase()}_CHAIN_ID is ${rail.settings.chainId}; nothing was compared`,
        });
        continue;
      }
      toBlock = await rail.blockNumber();
      if (fromBlock > toBlock) {
        diff({
          check: "start_block_ahead",
          txHash: "",
          paymentId: "",
          chainUnits: "",
          booksUnits: "",
          message: `${chain}: the start block ${fromBlock} is after the chain's latest block ${toBlock}; nothing was compared`,
        });
        continue;
      }
      // Both balances at fixed blocks, so a transfer mined meanwhile cannot skew the sum.
      balance = await rail.usdcBalance(undefined, toBlock);
      if (fromBlock > 0) {
        try {
          opening = await rail.usdcBalance(undefined, fromBlock - 1);
        } catch (err) {
          throw Object.assign(new Error(`no balance at block ${fromBlock - 1}: the node may keep no state that old`), { name: (err as Error).name });
        }
      }
      const range = options.range ?? LOG_RANGE;
      for (let from = fromBlock; from <= toBlock; from += range) {
        logs.push(...(await rail.transfers(from, Math.min(toBlock, from + range - 1))));
      }
    } catch (err) {
      diff({
        check: "chain_unreachable",
        txHash: "",
        paymentId: "",
        chainUnits: "",
        booksUnits: "",
        message: `${chain}: the node did not answer (${(err as Error).name}${(err as Error).message.startsWith("no balance at") ? `: ${(err as Error).message}` : ""})`,
      });
      continue;
    }
    logs = logs.sort((a, b) => a.blockNumber - b.blockNumber || a.logIndex - b.logIndex);
    const wallet = rail.wallet;
    const outgoing = logs.filter((l) => l.from === wallet && !own.has(l.to));
    const moved = logs.filter((l) => l.from === wallet && l.to !== wallet && own.has(l.to));
    const incoming = logs.filter((l) => l.to === wallet && l.from !== wallet);
    const sum = (ls: UsdcTransfer[]) => ls.reduce((t, l) => t + l.units, 0n);

    // The payments and the ledger from one snapshot; payments mined after the blocks read are left
    // out of both sides, so a payment completing during the run is no difference.
    const { all, ledgerOutflow } = await db.transaction(async (trx) => {
      await trx.raw("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
      const { rows } = await trx.raw(
        `SELECT payment_id::text, mined_block::text, recipient, amount_cents::text, lower(tx_hash) AS tx_hash FROM settlement_payments
            WHERE chain = ? AND wallet = ? AND rail = 'evm' AND status = 'completed' ORDER BY created_at, payment_id`,
        [chain, wallet],
      );
      const total = await accountTotalCents(trx, { kind: "external", owner: hotWalletAccount(chain, wallet), currency: "USD" });
      return { all: rows as CompletedPayment[], ledgerOutflow: centsToUnits(total) };
    });
    const before = (p: CompletedPayment) => p.mined_block !== null && Number(p.mined_block) < fromBlock;
    const after = (p: CompletedPayment) => p.mined_block !== null && Number(p.mined_block) > toBlock;
    const payments = all.filter((p) => !before(p) && !after(p));
    const sentBefore = all.filter(before).reduce((t, p) => t + centsToUnits(BigInt(p.amount_cents)), 0n);
    const sentAfter = all.filter(after).reduce((t, p) => t + centsToUnits(BigInt(p.amount_cents)), 0n);
    const byHash = new Map<string, CompletedPayment[]>();
    for (const p of payments) if (p.tx_hash) byHash.set(p.tx_hash, [...(byHash.get(p.tx_hash) ?? []), p]);
    const matched = new Set<string>();
    for (const t of outgoing) {
      const ps = byHash.get(t.txHash) ?? [];
      const p = ps.find((x) => !matched.has(x.payment_id));
      if (!p) {
        diff({
          check: "transfer_without_payment",
          txHash: t.txHash,
          paymentId: "",
          chainUnits: `${t.units}`,
          booksUnits: "0",
          message: `${chain}: transfer ${t.txHash} of ${t.units} units to ${t.to} matches no completed payment`,
        });
        continue;
      }
      matched.add(p.payment_id);
      const booked = centsToUnits(BigInt(p.amount_cents));
      if (booked !== t.units) {
        diff({
          check: "amount_mismatch",
          txHash: t.txHash,
          paymentId: p.payment_id,
          chainUnits: `${t.units}`,
          booksUnits: `${booked}`,
          message: `${chain}: payment ${p.payment_id} (${t.txHash}) sent ${t.units} units on chain but the books say ${booked}`,
        });
      }
      if (p.recipient !== t.to) {
        diff({
          check: "counterparty_mismatch",
          txHash: t.txHash,
          paymentId: p.payment_id,
          chainUnits: `${t.units}`,
          booksUnits: `${booked}`,
          message: `${chain}: payment ${p.payment_id} (${t.txHash}) went to ${t.to} on chain but the books say ${p.recipient}`,
        });
      }
    }
    for (const p of payments) {
      if (matched.has(p.payment_id)) continue;
      const booked = centsToUnits(BigInt(p.amount_cents));
      diff({
        check: "payment_without_transfer",
        txHash: p.tx_hash ?? "",
        paymentId: p.payment_id,
        chainUnits: "0",
        booksUnits: `${booked}`,
        message: `${chain}: completed payment ${p.payment_id} of ${booked} units has no transfer ${p.tx_hash ?? "(no hash)"} on chain`,
      });
    }

    const sentOut = sum(outgoing);
    const booksOut = ledgerOutflow - sentAfter;
    if (booksOut !== sentBefore + sentOut) {
      diff({
        check: "ledger_mismatch",
        txHash: "",
        paymentId: "",
        chainUnits: `${sentBefore + sentOut}`,
        booksUnits: `${booksOut}`,
        message: `${chain}: transfers out of ${wallet} total ${sentBefore + sentOut} units${sentBefore ? ` (${sentBefore} of them in payments mined before block ${fromBlock})` : ""} but its ledger account holds ${booksOut}`,
      });
    }
    const fromLogs = opening + sum(incoming) - sentOut - sum(moved);
    if (fromLogs !== balance) {
      diff({
        check: "balance_mismatch",
        txHash: "",
        paymentId: "",
        chainUnits: `${balance}`,
        booksUnits: `${fromLogs}`,
        message: `${chain}: ${wallet} holds ${balance} units but ${fromBlock ? `its balance at block ${fromBlock - 1} (${opening}) and its Transfer logs since` : "its Transfer logs"} add up to ${fromLogs}`,
      });
    }
    chains.push({
      chain,
      wallet,
      onchainBalanceUnits: `${balance}`,
      incomingUnits: `${sum(incoming)}`,
      outgoingUnits: `${sentOut}`,
      ledgerOutflowUnits: `${booksOut}`,
      toBlock: BigInt(toBlock),
      fromBlock: BigInt(fromBlock),
      openingBalanceUnits: `${opening}`,
    });
  }
  return { ok: differences.length === 0, chains, differences };
}
