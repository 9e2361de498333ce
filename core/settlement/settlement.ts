import type { Knex } from "knex";
import type { Logger } from "pino";
import type { PrivateKeyAccount } from "viem/accounts";
import type { AuditStore } from "../audit/store.js";
import type { Db } from "../db/knex.js";
import { SettlementConfigError, type SettlementSettings } from "./config.js";
import { createEvmRail, type EvmRail } from "./evm-rail.js";
import { registerSettlementMetrics } from "./metrics.js";
import type { RailKind } from "./rules.js";
import type { SettlementPayment } from "./records.js";
import { createSettlementStore, type SettlementStore } from "./store.js";
import { verifyChains } from "./verify-chains.js";
import { loadHotWallet } from "./wallet.js";
import { createSettlementWorker, type SettlementHooks, type SettlementWorker, type SettlementWorkerOptions } from "./worker.js";

export interface SettlementOptions {
  db: Db;
  logger: Logger;
  clock: () => Date;
  settings: SettlementSettings;
  /** Each evm chain's hot wallet (loadHotWallets). */
  wallets: ReadonlyMap<string, PrivateKeyAccount>;
  hooks?: SettlementHooks;
  /** The worker's loop period; 0 = no loop. */
  pollMs: number;
  worker?: Pick<SettlementWorkerOptions, "leaseMs" | "batchSize" | "recheckMs" | "bumpAfterMs" | "underfundedRetryMs" | "walletReadMs">;
}

export interface Settlement {
  store: SettlementStore;
  /** The rail that serves a chain. */
  railOf(chain: string): RailKind;
  /** The chains on the evm rail. */
  evmChains(): string[];
  /** The evm rail of a chain (its settings and hot wallet), if it is on one. */
  evm(chain: string): EvmRail | undefined;
  /**
   * Readiness: every evm chain's node answered with its configured chain id. A node that
   * has not answered yet is asked again here (its chain is not served meanwhile).
   */
  ready(): Promise<boolean>;
  worker: SettlementWorker;
  /** Each evm chain's hot wallet against its completed payments and ledger account. */
  /** `fromBlock`: per chain, the first block to read for this run instead of CHAIN_<NAME>_START_BLOCK. */
  verifyChains(fromBlock?: ReadonlyMap<string, number>): ReturnType<typeof verifyChains>;
  stop(): Promise<void>;
}

/** What the payments code needs of settlement: the rail of a chain and the rows. */
export type SettlementPort = Pick<Settlement, "store" | "evm">;

/**
 * Each evm chain's hot wallet, from its key file or DATA_DIR's (made there on first use; absent
 * DATA_DIR, one key per process). Read before core opens its database, so a bad key file touches nothing.
 */
export async function loadHotWallets(settings: SettlementSettings, dataDir?: string): Promise<Map<string, PrivateKeyAccount>> {
  const wallets = new Map<string, PrivateKeyAccount>();
  for (const s of settings.evm) wallets.set(s.chain, await loadHotWallet({ chain: s.chain, keyFile: s.walletKeyFile, dataDir }));
  return wallets;
}

/**
 * Settlement for one core: a rail per chain, the hot wallets, and the worker. A node that
 * answers with another chain id refuses the start naming CHAIN_<NAME>_CHAIN_ID; a node that
 * does not answer is a readiness failure, asked again until it answers.
 */
export async function startSettlement(options: SettlementOptions): Promise<Settlement> {
  const store = createSettlementStore(options.db);
  const rails = new Map<string, EvmRail>();
  for (const s of options.settings.evm) {
    rails.set(s.chain, createEvmRail(s, options.wallets.get(s.chain)!));
  }
  // Two chains paying from one wallet on one network would take each other's nonces and read each other's transfers.
  const paying = new Map<string, string>();
  for (const r of rails.values()) {
    const other = paying.get(`${r.settings.chainId}:${r.wallet}`);
    if (other) {
      const [a, b] = [other, r.settings.chain].map((c) => `CHAIN_${c.toUpperCase()}_CHAIN_ID`);
      throw new SettlementConfigError(
        `${a} and ${b} are both ${r.settings.chainId}, with one hot wallet: chains on one network need their own CHAIN_<NAME>_WALLET_KEY_FILE`,
      );
    }
    paying.set(`${r.settings.chainId}:${r.wallet}`, r.settings.chain);
  }
  const verified = new Map<string, EvmRail>();

  /** Each retired wallet listed must be one that paid on this chain and network from this database, not the current one. */
  async function checkRetired(rail: EvmRail, id: number): Promise<void> {
    const setting = `CHAIN_${rail.settings.chain.toUpperCase()}_RETIRED_WALLETS`;
    for (const wallet of rail.settings.retiredWallets ?? []) {
      if (wallet === rail.wallet) throw new SettlementConfigError(`${setting} lists ${wallet}, the hot wallet this core pays from`);
      const bound = await store.boundChainId(rail.settings.chain, wallet);
      if (bound === undefined)
        throw new SettlementConfigError(`${setting} lists ${wallet}, which was never chain ${rail.settings.chain}'s hot wallet in this database`);
      if (bound !== id) throw new SettlementConfigError(`${setting} lists ${wallet}, which paid on chain id ${bound}; this node is chain id ${id}`);
    }
  }

  /** Asks a node its chain id: true when it matches, false when it did not answer; throws on a mismatch. */
  async function verify(rail: EvmRail): Promise<boolean> {
    let id: number;
    try {
      id = await rail.chainId();
    } catch (err) {
      options.logger.warn(
        { chain: rail.settings.chain, err: { name: (err as Error).name } },
        `chain ${rail.settings.chain}: its node (CHAIN_${rail.settings.chain.toUpperCase()}_RPC_URL) does not answer; not ready`,
      );
      return false;
    }
    if (id !== rail.settings.chainId) {
      throw new SettlementConfigError(
        `CHAIN_${rail.settings.chain.toUpperCase()}_CHAIN_ID is ${rail.settings.chainId} but the node at CHAIN_${rail.settings.chain.toUpperCase()}_RPC_URL reports chain id ${id}`,
      );
    }
    // A wrong contract would leave every payment pending (or pay in another token's units) while core reported ready.
    let decimals: number | undefined;
    try {
      decimals = await rail.usdcDecimals();
    } catch (err) {
      options.logger.warn(
        { chain: rail.settings.chain, err: { name: (err as Error).name } },
        `chain ${rail.settings.chain}: its node does not answer; not ready`,
      );
      return false;
    }
    if (decimals !== 6) {
      throw new SettlementConfigError(
        `CHAIN_${rail.settings.chain.toUpperCase()}_USDC is ${rail.settings.usdc}, which on chain id ${id} is ${decimals === undefined ? "no token contract" : `a token of ${decimals} decimals`}; USDC is a 6-decimal token`,
      );
    }
    // Replicas on one database must pay a wallet on one network: its nonce counter and payments are that network's.
    const bound = await store.bindChainId(rail.settings.chain, rail.wallet, id);
    if (bound !== id) {
      const setting = `CHAIN_${rail.settings.chain.toUpperCase()}_`;
      throw new SettlementConfigError(
        `${setting}CHAIN_ID is ${id} but this database's ${rail.settings.chain} payments from hot wallet ${rail.wallet} are on chain id ${bound}; a hot wallet pays on one network (give this one its own ${setting}WALLET_KEY_FILE)`,
      );
    }
    await checkRetired(rail, id);
    verified.set(rail.settings.chain, rail);
    options.logger.info({ chain: rail.settings.chain, chainId: id, wallet: rail.wallet }, `chain ${rail.settings.chain} settles on the evm rail`);
    return true;
  }

  await Promise.all([...rails.values()].map(verify));

  // One check of the unanswered nodes at a time, in the background: a node that hangs must
  // not hold /readyz (and the start line that waits on it) for its RPC timeout.
  let checking: Promise<boolean> | undefined;
  function recheck(): Promise<boolean> {
    checking ??= Promise.all(
      [...rails.values()]
        .filter((r) => !verified.has(r.settings.chain))
        .map((r) =>
          verify(r).catch((err: unknown) => {
            options.logger.error({ chain: r.settings.chain, err: { message: (err as Error).message } }, "settlement chain misconfigured");
            return false;
          }),
        ),
    )
      .then((results) => results.every(Boolean))
      .finally(() => (checking = undefined));
    return checking;
  }

  /** Ready when every node has answered with its chain id; else not ready now, and asked again. */
  async function ready(): Promise<boolean> {
    if (verified.size === rails.size) return true;
    void recheck();
    return false;
  }

  const worker = createSettlementWorker({
    store,
    rails: () => verified,
    clock: options.clock,
    logger: options.logger,
    hooks: options.hooks,
    pollMs: options.pollMs,
    ...options.worker,
  });
  const unregister = registerSettlementMetrics({ store, clock: options.clock, chains: () => [...rails.keys()] });
  // Chains whose node was down at start join once it answers.
  const retry = rails.size > verified.size ? setInterval(() => void recheck().then((ok) => ok && clearInterval(retry)), 5_000).unref() : undefined;
  return {
    store,
    railOf: (chain) => (rails.has(chain) ? "evm" : "sandbox"),
    evmChains: () => [...rails.keys()],
    evm: (chain) => rails.get(chain),
    ready,
    worker,
    verifyChains: (fromBlock) => verifyChains(options.db, [...rails.values()], { fromBlock: (chain) => fromBlock?.get(chain) }),
    async stop() {
      if (retry) clearInterval(retry);
      unregister();
      await worker.stop();
    },
  };
}

/**
 * A status change in the paying agent's audit feed (`payments.settlement.<status>`, the
 * payment as subject), written in the transaction that makes it; `agent` as budgets name it.
 */
export async function auditSettlement(trx: Knex.Transaction, audit: AuditStore, p: SettlementPayment, at: Date, agent: string | undefined): Promise<void> {
  await audit.append(trx, {
    requestId: `settlement:${p.paymentId}`,
    actor: agent ? `agent:${agent}` : "settlement",
    action: `payments.settlement.${p.status}`,
    outcome: p.status === "failed" ? "failure" : "success",
    reason: p.failureReason ?? (p.txHash ? `tx_hash:${p.txHash}` : ""),
    subject: p.paymentId,
    at,
  });
}
