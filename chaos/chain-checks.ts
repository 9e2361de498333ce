/** Settlement invariants from the final database and the chain (listed in docs/chaos.md): every
 * payment ended, paid exactly once or refunded, chain, hot wallet and ledger agree, one nonce each. */
import type pg from "pg";
import { keccak256, parseTransaction, type Hex } from "viem";
import { adminClients } from "./cluster.js";
import { UNITS_PER_CENT } from "../core/settlement/rules.js";
import { CHAIN, FUNDING_UNITS } from "./chain.js";
import type { World } from "./world.js";

interface Violation {
  check: string;
  message: string;
  evidence?: unknown;
}

class Report {
  checked = 0;
  violations: Violation[] = [];
  constructor(readonly name: string) {}
  fail(message: string, evidence?: unknown): void {
    this.violations.push({ check: this.name, message, evidence });
  }
}

/** keccak256("Transfer(address,address,uint256)") */
const TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

interface MinedTransfer {
  txHash: string;
  to: string;
  units: bigint;
}

interface Settled {
  payment_id: string;
  recipient: string;
  amount: string;
  status: string;
  tx_hash: string | null;
  nonce: string | null;
}

export async function chainChecks(w: World, c: pg.Client): Promise<Report[]> {
  const run = w.chain;
  if (!run) return [];
  const chain = run.chain;
  const { rows: payments } = await c.query<Settled>(
    `SELECT payment_id, lower(recipient) AS recipient, amount_cents::text AS amount, status, lower(tx_hash) AS tx_hash, nonce::text AS nonce
       FROM settlement_payments WHERE rail = 'evm' AND chain = $1 AND wallet = $2`,
    [CHAIN, chain.wallet],
  );
  const { rows: txs } = await c.query<{ tx_hash: string; payment_id: string; kind: string; raw_tx: string }>(
    `SELECT lower(t.tx_hash) AS tx_hash, t.payment_id, t.kind, t.raw_tx FROM settlement_transactions t JOIN settlement_payments s USING (payment_id) WHERE s.chain = $1`,
    [CHAIN],
  );
  const logs = await chain.rpc<{ transactionHash: string; topics: string[]; data: string }[]>("eth_getLogs", [
    { fromBlock: "0x0", toBlock: "latest", address: chain.usdc, topics: [TRANSFER_TOPIC, `0x${chain.wallet.slice(2).padStart(64, "0")}`] },
  ]);
  const mined: MinedTransfer[] = logs.map((l) => ({
    txHash: l.transactionHash.toLowerCase(),
    to: `0x${l.topics[2]!.slice(26)}`.toLowerCase(),
    units: BigInt(l.data),
  }));
  return [
    await ended(c, payments),
    paidOnce(payments, txs, mined),
    await refunded(c, payments),
    await booksAgree(w, c, payments),
    sameNonceSameBytes(w, payments, txs),
  ];
}

/** Every accepted payment on the chain has its settlement, and it reached completed or failed. */
async function ended(c: pg.Client, payments: Settled[]): Promise<Report> {
  const r = new Report("evm payments end completed or failed");
  const { rows } = await c.query(`SELECT id FROM agent_payments WHERE chain = $1 AND status = 'completed'`, [CHAIN]);
  const byId = new Map(payments.map((p) => [p.payment_id, p]));
  for (const a of rows) {
    r.checked++;
    const p = byId.get(a.id);
    if (!p) r.fail(`accepted payment ${a.id} on ${CHAIN} has no settlement`);
    else if (p.status !== "completed" && p.status !== "failed") r.fail(`payment ${a.id} is still ${p.status} after settling`, p);
  }
  return r;
}

/** Mined transfers against stored hashes: one per completed payment, none for a failed one, sums per counterparty. */
function paidOnce(payments: Settled[], txs: { tx_hash: string; payment_id: string; kind: string }[], mined: MinedTransfer[]): Report {
  const r = new Report("counterparties paid exactly once");
  const stored = new Map(txs.map((t) => [t.tx_hash, t]));
  const minedBy = new Map<string, MinedTransfer[]>();
  const received = new Map<string, bigint>();
  for (const m of mined) {
    r.checked++;
    received.set(m.to, (received.get(m.to) ?? 0n) + m.units);
    const t = stored.get(m.txHash);
    if (t?.kind !== "transfer") {
      r.fail(`mined transfer ${m.txHash} of ${m.units} units to ${m.to} is no stored transfer of any payment`);
      continue;
    }
    minedBy.set(t.payment_id, [...(minedBy.get(t.payment_id) ?? []), m]);
  }
  const owed = new Map<string, bigint>();
  for (const p of payments) {
    const got = minedBy.get(p.payment_id) ?? [];
    const units = BigInt(p.amount) * UNITS_PER_CENT;
    if (got.length > 1) r.fail(`payment ${p.payment_id} was paid ${got.length} times on chain`, got);
    if (p.status === "completed") {
      owed.set(p.recipient, (owed.get(p.recipient) ?? 0n) + units);
      const m = got[0];
      if (!m) r.fail(`completed payment ${p.payment_id} has no mined transfer (stored hash ${p.tx_hash})`);
      else if (m.txHash !== p.tx_hash || m.to !== p.recipient || m.units !== units)
        r.fail(`completed payment ${p.payment_id} (${p.tx_hash}, ${units} to ${p.recipient}) was mined as ${m.txHash}, ${m.units} to ${m.to}`);
    } else if (p.status === "failed" && got.length) r.fail(`failed payment ${p.payment_id} was paid on chain by ${got[0]!.txHash}`);
  }
  for (const to of new Set([...received.keys(), ...owed.keys()])) {
    r.checked++;
    if ((received.get(to) ?? 0n) !== (owed.get(to) ?? 0n))
      r.fail(`counterparty ${to} received ${received.get(to) ?? 0n} units on chain; its completed payments sum to ${owed.get(to) ?? 0n}`);
  }
  return r;
}

/** A failed payment's amount went back to its vault once; no other payment was refunded. */
async function refunded(c: pg.Client, payments: Settled[]): Promise<Report> {
  const r = new Report("failed evm payments refunded");
  const { rows } = await c.query(
    `SELECT substr(t.reference, 9) AS payment_id, count(DISTINCT t.id)::int AS n, coalesce(sum(p.amount_cents) FILTER (WHERE a.kind = 'vault'), 0)::text AS to_vault
       FROM ledger_transactions t JOIN ledger_postings p ON p.transaction_id = t.id JOIN ledger_accounts a ON a.id = p.account_id
      WHERE t.kind = 'payment.refund' GROUP BY t.reference`,
  );
  const refunds = new Map(rows.map((x) => [x.payment_id as string, x]));
  for (const p of payments) {
    r.checked++;
    const f = refunds.get(p.payment_id);
    if (p.status === "failed" && (f?.n !== 1 || f.to_vault !== p.amount))
      r.fail(`failed payment ${p.payment_id} of ${p.amount} cents: refunds ${f?.n ?? 0}, to its vault ${f?.to_vault ?? 0}`);
    if (p.status !== "failed" && f) r.fail(`payment ${p.payment_id} is ${p.status} but was refunded`);
  }
  return r;
}

async function account(c: pg.Client, owner: string): Promise<bigint> {
  const { rows } = await c.query(
    `SELECT coalesce(sum(p.amount_cents), 0)::text AS s FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id WHERE a.kind = 'external' AND a.owner = $1`,
    [owner],
  );
  return BigInt(rows[0].s);
}

/** The hot wallet's balance, its ledger account, the in-flight account and `ledger verify --chains`. */
async function booksAgree(w: World, c: pg.Client, payments: Settled[]): Promise<Report> {
  const r = new Report("chain, hot wallet and ledger agree");
  const chain = w.chain!.chain;
  const completed = payments.filter((p) => p.status === "completed").reduce((s, p) => s + BigInt(p.amount), 0n);
  const open = payments.filter((p) => p.status === "pending" || p.status === "submitted").reduce((s, p) => s + BigInt(p.amount), 0n);
  const raw = await chain.rpc<string>("eth_call", [{ to: chain.usdc, data: `0x70a08231${chain.wallet.slice(2).padStart(64, "0")}` }, "latest"]);
  // "0x": the node has no USDC contract any more (a broken node state, not a payment).
  const balance = raw === "0x" ? -1n : BigInt(raw);
  r.checked += 3;
  if (balance !== FUNDING_UNITS - completed * UNITS_PER_CENT)
    r.fail(
      `hot wallet holds ${balance} units on chain; funding ${FUNDING_UNITS} - completed ${completed * UNITS_PER_CENT} = ${FUNDING_UNITS - completed * UNITS_PER_CENT}`,
    );
  const hot = await account(c, `hot_wallet:${CHAIN}:${chain.wallet}`);
  if (hot !== completed) r.fail(`ledger hot-wallet account holds ${hot} cents; completed payments sum to ${completed}`);
  const inFlight = await account(c, "in_flight");
  if (inFlight !== open) r.fail(`ledger in-flight account holds ${inFlight} cents; payments not completed or failed sum to ${open}`);
  const res = await adminClients(w.replicas.find((x) => x.up) ?? w.replicas[0]!, w.adminToken).audit.verifyChains({});
  for (const d of res.differences) r.fail(`ledger verify --chains: ${d.check} ${d.message}`);
  return r;
}

/** Each stored transaction hashes to its stored bytes and carries its payment's one nonce; a held broadcast went out later. */
function sameNonceSameBytes(w: World, payments: Settled[], txs: { tx_hash: string; payment_id: string; kind: string; raw_tx: string }[]): Report {
  const r = new Report("one nonce per payment, the stored bytes sent");
  const byId = new Map(payments.map((p) => [p.payment_id, p]));
  const nonces = new Map<string, string>();
  for (const p of payments) {
    if (p.nonce === null) continue;
    const other = nonces.get(p.nonce);
    if (other) r.fail(`payments ${other} and ${p.payment_id} share nonce ${p.nonce}`);
    nonces.set(p.nonce, p.payment_id);
  }
  for (const t of txs) {
    r.checked++;
    const p = byId.get(t.payment_id);
    if (keccak256(t.raw_tx as Hex).toLowerCase() !== t.tx_hash) r.fail(`stored transaction ${t.tx_hash} does not hash to its stored bytes`);
    const nonce = parseTransaction(t.raw_tx as Hex).nonce;
    if (!p || String(nonce) !== p.nonce) r.fail(`${t.kind} ${t.tx_hash} of payment ${t.payment_id} has nonce ${nonce}, the payment ${p?.nonce}`);
  }
  const kinds = new Map(txs.map((t) => [t.tx_hash, t]));
  for (const h of w.chain!.heldAtKill) {
    r.checked++;
    const t = kinds.get(h.txHash);
    if (!t) r.fail(`the broadcast ${h.txHash} held while ${h.replica} was killed is not stored: it was sent before it was stored`);
    else if (!w.chain!.chain.broadcast.has(h.txHash) && !txs.some((x) => x.payment_id === t.payment_id && w.chain!.chain.broadcast.has(x.tx_hash)))
      r.fail(`payment ${t.payment_id}: no transaction of it was ever sent after ${h.replica} was killed before its first broadcast`);
  }
  return r;
}
