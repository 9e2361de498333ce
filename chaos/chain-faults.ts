/** Chain faults of the campaign (docs/chaos.md), and the wait for settlement after them. */
import { keccak256, type Hex } from "viem";
import { CONFIRMATIONS, FINALITY_BLOCKS, type ChainRun } from "./chain.js";
import type { Rng } from "./rng.js";
import { sleep, withDb, type World } from "./world.js";

export const CHAIN_FAULTS = ["chain_restart", "chain_reorg", "chain_drop", "chain_timeout", "kill9_settlement"] as const;

const bump = (run: ChainRun, key: string, n = 1) => (run.stats[key] = (run.stats[key] ?? 0) + n);

export async function chainFault(w: World, rng: Rng, kind: string): Promise<string> {
  const run = w.chain!;
  const chain = run.chain;
  if (kind === "chain_restart") {
    const down = rng.int(2000, 5000);
    await chain.restart(down);
    return `node down ${down} ms`;
  }
  if (kind === "chain_reorg") {
    // Deeper than the confirmations (a completed payment is rechecked a few blocks later), short of finality.
    const head = Number(await chain.rpc<string>("eth_blockNumber"));
    // anvil (1.7) loses the contract's state when a reorg reaches back past its last restart.
    const depth = Math.min(rng.int(CONFIRMATIONS + 3, FINALITY_BLOCKS - 6), head - chain.startHead - 1);
    if (depth <= CONFIRMATIONS) {
      bump(run, "reorg_skipped_after_restart");
      return `skipped: only ${head - chain.startHead} blocks since the node restarted`;
    }
    // Completed (counted) transfers in the blocks the reorg removes.
    const { rows } = await withDb(w.db.url, (c) =>
      c.query(`SELECT count(*)::int AS n FROM settlement_payments WHERE status = 'completed' AND mined_block > $1`, [head - depth]),
    );
    await chain.rpc("anvil_reorg", [depth, []]);
    bump(run, "reorg_counted_removed", rows[0].n);
    return `depth ${depth} at block ${head}; ${rows[0].n} completed transfers in the removed blocks`;
  }
  if (kind === "chain_drop") return dropPending(run, rng);
  if (kind === "chain_timeout") {
    chain.mode = rng.pick(["stall", "lose_answers"] as const);
    const ms = rng.int(3000, 7000);
    const detail = `${chain.mode} ${ms} ms`;
    await sleep(ms);
    chain.release();
    return detail;
  }
  return kill9Settlement(w, run, rng);
}

/** Pauses mining so a settlement transfer stays pending, drops it from the node's pool, resumes. */
async function dropPending(run: ChainRun, rng: Rng): Promise<string> {
  const chain = run.chain;
  await chain.rpc("evm_setIntervalMining", [0]);
  let dropped = 0;
  try {
    const until = Date.now() + 6000;
    while (Date.now() < until && dropped === 0) {
      const pool = await chain.rpc<Record<string, Record<string, Record<string, { hash: string }>>>>("txpool_content");
      for (const part of [pool.pending ?? {}, pool.queued ?? {}])
        for (const [from, byNonce] of Object.entries(part)) {
          if (from.toLowerCase() !== chain.wallet) continue;
          for (const tx of Object.values(byNonce)) {
            await chain.rpc("anvil_dropTransaction", [tx.hash]);
            dropped++;
          }
        }
      if (!dropped) await sleep(150);
    }
    await sleep(rng.int(200, 1500));
  } finally {
    await chain.rpc("evm_setIntervalMining", [1]);
  }
  bump(run, "dropped", dropped);
  return `dropped ${dropped} pending transactions of the hot wallet`;
}

/** SIGKILL in the settlement windows: "stored" kills a replica while the proxy holds its first
 * broadcast; "signing" kills it 0-30 ms after its balance read, just before nonce, sign and store. */
async function kill9Settlement(w: World, run: ChainRun, rng: Rng): Promise<string> {
  const chain = run.chain;
  const window = rng.pick(["stored", "signing"] as const);
  const delay = rng.int(0, 30);
  let hit: { replica: string; at: number; txHash?: string; first?: boolean } | undefined;
  let found!: () => void;
  const got = new Promise<void>((r) => (found = r));
  chain.tap = (replica, methods, phase, body) => {
    if (hit || !w.replicas.find((r) => r.name === replica)?.up) return undefined;
    if (window === "stored" && phase === "request" && methods.includes("eth_sendRawTransaction")) {
      const txHash = keccak256((body as { params: Hex[] }).params[0]!);
      // Only a first broadcast: a repeated one is not the window between storing and sending.
      if (chain.broadcast.has(txHash)) return undefined;
      hit = { replica, at: Date.now(), txHash, first: true };
      found();
      return "hold";
    }
    if (window === "signing" && phase === "answered" && methods.includes("eth_call")) {
      hit = { replica, at: Date.now() };
      found();
    }
    return undefined;
  };
  await Promise.race([got, sleep(8000)]);
  chain.tap = undefined;
  if (!hit) {
    bump(run, `kill_${window}_missed`);
    return `${window}: no settlement step seen in 8 s`;
  }
  const r = w.replicas.find((x) => x.name === hit!.replica)!;
  if (window === "signing") await sleep(delay);
  const killedAt = Date.now();
  await r.kill9();
  chain.release();
  let detail: string;
  if (window === "stored") {
    bump(run, hit.first ? "kill_stored_before_first_broadcast" : "kill_stored_at_rebroadcast");
    if (hit.first) run.heldAtKill.push({ replica: r.name, txHash: hit.txHash!.toLowerCase() });
    detail = `${r.name} killed holding ${hit.first ? "the first" : "a repeated"} broadcast of ${hit.txHash}`;
  } else {
    const { rows } = await withDb(w.db.url, (c) =>
      c.query(`SELECT count(*)::int AS n FROM settlement_transactions WHERE created_at >= $1 AND created_at <= $2`, [new Date(hit!.at), new Date(killedAt)]),
    );
    bump(run, "kill_after_presign_read");
    bump(run, rows[0].n > 0 ? "kill_after_presign_read_stored_meanwhile" : "kill_after_presign_read_nothing_stored");
    detail = `${r.name} killed ${killedAt - hit.at} ms after a pre-sign read; ${rows[0].n} transactions stored meanwhile`;
  }
  await sleep(rng.int(500, 2500));
  await r.start();
  return detail;
}

/**
 * After the faults: the node up and mining, the proxy passing everything; waits (bounded)
 * until no evm payment is pending or submitted. A killed replica's lease (60 s) and the
 * expiry bound how long that can take.
 */
export async function settleChain(w: World, limitMs = 150_000): Promise<void> {
  const run = w.chain;
  if (!run) return;
  await run.chain.heal();
  const until = Date.now() + limitMs;
  let lastLog = 0;
  while (Date.now() < until) {
    const { rows } = await withDb(w.db.url, (c) =>
      c.query(`SELECT count(*)::int AS n FROM settlement_payments WHERE rail = 'evm' AND status IN ('pending', 'submitted')`),
    );
    if (rows[0].n === 0) return;
    if (Date.now() - lastLog > 10_000) {
      w.log(`settlement: ${rows[0].n} evm payments not yet completed or failed`);
      lastLog = Date.now();
    }
    await sleep(1000);
  }
}
