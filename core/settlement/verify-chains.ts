import type { Db } from "../db/knex.js";
import type { EvmRail, UsdcTransfer } from "./evm-rail.js";
import { hotWalletAccount } from "./ledger.js";

/**
 * Books against the chain, per hot wallet: each outgoing transfer is exactly one completed
 * payment, and the ledger account and wallet balance match the Transfer logs. Read-only.
 */
export const UNITS_PER_CENT = 10_000n;
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
  recipient: string;
  amount_cents: string;
  tx_hash: string | null;
}

export async function verifyChains(db: Db, rails: EvmRail[], options: { fromBlock?: (chain: string) => number; range?: number } = {}) {
  const chains: ChainBooks[] = [];
  const differences: ChainDifference[] = [];
  for (const rail of rails) {
    const chain = rail.settings.chain;
    const diff = (d: Omit<ChainDifference, "chain">) => differences.push({ chain, ...d });
    let toBlock: number;
    let balance: bigint;
    let logs: UsdcTransfer[] = [];
    try {
      toBlock = await rail.blockNumber();
      balance = await rail.usdcBalance();
      const range = options.range ?? LOG_RANGE;
      for (let from = options.fromBlock?.(chain) ?? 0; from <= toBlock; from += range) {
        logs.push(...(await rail.transfers(from, Math.min(toBlock, from + range - 1))));
      }
    } catch (err) {
      diff({
        check: "chain_unreachable",
        txHash: "",
        paymentId: "",
        chainUnits: "",
        booksUnits: "",
        message: `${chain}: the node did not answer (${(err as Error).name})`,
      });
      continue;
    }
    logs = logs.sort((a, b) => a.blockNumber - b.blockNumber || a.logIndex - b.logIndex);
    const wallet = rail.wallet;
    const outgoing = logs.filter((l) => l.from === wallet && l.to !== wallet);
    const incoming = logs.filter((l) => l.to === wallet && l.from !== wallet);
    const sum = (ls: UsdcTransfer[]) => ls.reduce((t, l) => t + l.units, 0n);

    const { rows } = await db.raw(
      `SELECT payment_id::text, recipient, amount_cents::text, lower(tx_hash) AS tx_hash FROM settlement_payments
        WHERE chain = ? AND wallet = ? AND rail = 'evm' AND status = 'completed' ORDER BY created_at, payment_id`,
      [chain, wallet],
    );
    const payments = rows as CompletedPayment[];
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
      const booked = BigInt(p.amount_cents) * UNITS_PER_CENT;
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
      if (p.recipient.toLowerCase() !== t.to) {
        diff({
          check: "counterparty_mismatch",
          txHash: t.txHash,
          paymentId: p.payment_id,
          chainUnits: `${t.units}`,
          booksUnits: `${booked}`,
          message: `${chain}: payment ${p.payment_id} (${t.txHash}) went to ${t.to} on chain but the books say ${p.recipient.toLowerCase()}`,
        });
      }
    }
    for (const p of payments) {
      if (matched.has(p.payment_id)) continue;
      const booked = BigInt(p.amount_cents) * UNITS_PER_CENT;
      diff({
        check: "payment_without_transfer",
        txHash: p.tx_hash ?? "",
        paymentId: p.payment_id,
        chainUnits: "0",
        booksUnits: `${booked}`,
        message: `${chain}: completed payment ${p.payment_id} of ${booked} units has no transfer ${p.tx_hash ?? "(no hash)"} on chain`,
      });
    }

    const { rows: ledgerRows } = await db.raw(
      `SELECT coalesce(sum(amount_cents), 0)::text AS total FROM ledger_postings WHERE account_id = ledger_account_id('external', ?, 'USD')`,
      [hotWalletAccount(chain, wallet)],
    );
    const ledgerOutflow = BigInt((ledgerRows as { total: string }[])[0]!.total) * UNITS_PER_CENT;
    const sentOut = sum(outgoing);
    if (ledgerOutflow !== sentOut) {
      diff({
        check: "ledger_mismatch",
        txHash: "",
        paymentId: "",
        chainUnits: `${sentOut}`,
        booksUnits: `${ledgerOutflow}`,
        message: `${chain}: transfers out of ${wallet} total ${sentOut} units but its ledger account holds ${ledgerOutflow}`,
      });
    }
    const fromLogs = sum(incoming) - sentOut;
    if (fromLogs !== balance) {
      diff({
        check: "balance_mismatch",
        txHash: "",
        paymentId: "",
        chainUnits: `${balance}`,
        booksUnits: `${fromLogs}`,
        message: `${chain}: ${wallet} holds ${balance} units but its Transfer logs add up to ${fromLogs}`,
      });
    }
    chains.push({
      chain,
      wallet,
      onchainBalanceUnits: `${balance}`,
      incomingUnits: `${sum(incoming)}`,
      outgoingUnits: `${sentOut}`,
      ledgerOutflowUnits: `${ledgerOutflow}`,
      toBlock: BigInt(toBlock),
    });
  }
  return { ok: differences.length === 0, chains, differences };
}
