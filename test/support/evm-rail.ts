import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { expect } from "chai";
import type { Hex } from "viem";
import { privateKeyToAccount, type PrivateKeyAccount } from "viem/accounts";
import type { EvmChainSettings } from "../../core/settlement/config.js";
import type { EvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { localChainSettings } from "../../cli/local-chain.js";
import { ANVIL_CHAIN_ID, freshWalletKeyFile, startAnvil, startRpcProxy, type Anvil, type RpcProxy } from "./anvil.js";
import { ownDatabase } from "./db.js";
import { fundedChildBudget, stackRpc } from "./budgets.js";
import type { StackOptions, TestStack } from "./stack.js";

export const freshAddress = () => privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;

/** Chain base on the evm rail against a local node; a test overrides what it is about. */
export function evmChainSettings(rpcUrl: string, usdc: Hex, over: Partial<EvmChainSettings> = {}): EvmChainSettings {
  return {
    chain: "base",
    rail: "evm",
    rpcUrl,
    usdc,
    chainId: ANVIL_CHAIN_ID,
    confirmations: 2,
    finalityBlocks: 4,
    expirySeconds: 3600,
    rpcTimeoutMs: 2000,
    ...over,
  };
}

/** A local anvil with contracts/USDC.sol deployed on it. */
export async function startAnvilWithUsdc(): Promise<{ anvil: Anvil; usdc: Hex }> {
  const anvil = await startAnvil();
  try {
    return { anvil, usdc: await anvil.deployUsdc() };
  } catch (err) {
    await anvil.stop();
    throw err;
  }
}

/** A new hot wallet with gas and `cents` of USDC: its key, account (to sign) and lower-case address. */
export async function freshHotWallet(anvil: Anvil, usdc: Hex, cents: number): Promise<{ key: Hex; account: PrivateKeyAccount; wallet: string }> {
  const key = `0x${randomBytes(32).toString("hex")}` as Hex;
  const account = privateKeyToAccount(key);
  const wallet = account.address.toLowerCase();
  await fundHotWallet(anvil, usdc, wallet, centsToUnits(cents));
  return { key, account, wallet };
}

/** Gas and `usdcUnits` of USDC for a hot wallet (0: gas only). */
export async function fundHotWallet(anvil: Anvil, usdc: Hex, address: string, usdcUnits: bigint): Promise<void> {
  await anvil.fundGas(address);
  if (usdcUnits > 0n) await anvil.mintUsdc(usdc, address, usdcUnits);
}

export interface EvmChain {
  anvil: Anvil;
  usdc: Hex;
  /** The hot wallet's key file, fresh (see freshWalletKeyFile). */
  keyFile: string;
  /** The hot wallet, read from keyFile: for sends made with its key outside Vaultgate. */
  account: PrivateKeyAccount;
  /** Chain base on the evm rail against anvil, with keyFile as its hot wallet. */
  settings: EvmChainSettings;
}

/** anvil with USDC, and chain base's settings with a fresh hot wallet key. */
export async function startEvmChain(): Promise<EvmChain> {
  const { anvil, usdc } = await startAnvilWithUsdc();
  try {
    const keyFile = await freshWalletKeyFile();
    const account = privateKeyToAccount((await readFile(keyFile, "utf8")).trim() as Hex);
    return { anvil, usdc, keyFile, account, settings: evmChainSettings(anvil.url, usdc, { walletKeyFile: keyFile }) };
  } catch (err) {
    await anvil.stop();
    throw err;
  }
}

/** Stack options for one chain on the evm rail: the worker runs only when a test calls runOnce, with no waits between looks. */
export function evmRailStackOptions(settings: EvmChainSettings): StackOptions {
  return { settlement: { evm: [settings] }, settlementPollMs: 0, settlementWorker: { recheckMs: 0, underfundedRetryMs: 0 } };
}

/**
 * startEvmChain, then a stack from `start` (startStack or startMcpStack) on it, `options` over
 * evmRailStackOptions; its hot wallet gets gas and `usdcCents` of USDC.
 */
export async function startEvmRailStack<S extends TestStack>(
  start: (options: StackOptions) => Promise<S>,
  usdcCents: number,
  options: StackOptions = {},
): Promise<EvmChain & { stack: S; wallet: string }> {
  const chain = await startEvmChain();
  try {
    return { ...chain, ...(await fundedStack(chain, chain.settings, start, usdcCents, options)) };
  } catch (err) {
    await chain.anvil.stop();
    throw err;
  }
}

export interface ProxiedEvmStack<S extends TestStack> extends EvmChain {
  /** Between the stack and anvil: a test switches its mode, holds, fails or retargets requests. */
  proxy: RpcProxy;
  stack: S;
  wallet: string;
  /** Closes the stack, then the proxy and anvil, then drops the stack's own database if it had one. */
  stop(): Promise<void>;
}

/**
 * startEvmRailStack with the stack's node behind startRpcProxy; `settings` over the chain's. `ownBooks`: on
 * a database of its own, for a test reading totals or a queue that other files' payments would change.
 */
export async function startProxiedEvmStack<S extends TestStack>(
  start: (options: StackOptions) => Promise<S>,
  usdcCents: number,
  over: { settings?: Partial<EvmChainSettings>; ownBooks?: boolean } = {},
): Promise<ProxiedEvmStack<S>> {
  const undo: (() => Promise<unknown>)[] = [];
  const stop = async () => {
    for (const step of undo.splice(0).reverse()) await step();
  };
  try {
    const books = over.ownBooks ? await ownDatabase() : undefined;
    if (books) undo.push(() => books.drop());
    const chain = await startEvmChain();
    undo.push(() => chain.anvil.stop());
    const proxy = await startRpcProxy(chain.anvil.url);
    undo.push(() => proxy.stop());
    const settings = { ...chain.settings, rpcUrl: proxy.url, ...over.settings };
    const funded = await fundedStack(chain, settings, start, usdcCents, books ? { database: books.db } : {});
    undo.push(() => funded.stack.close());
    return { ...chain, settings, proxy, ...funded, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** A stack paying `settings`' chain on `chain`'s node, its hot wallet given gas and `usdcCents` of USDC; closed again if that fails. */
async function fundedStack<S extends TestStack>(
  chain: EvmChain,
  settings: EvmChainSettings,
  start: (options: StackOptions) => Promise<S>,
  usdcCents: number,
  options: StackOptions,
): Promise<{ stack: S; wallet: string }> {
  const stack = await start({ ...evmRailStackOptions(settings), ...options });
  try {
    const wallet = stack.core.settlement.evm(settings.chain)!.wallet;
    await fundHotWallet(chain.anvil, chain.usdc, wallet, centsToUnits(usdcCents));
    return { stack, wallet };
  } catch (err) {
    await stack.close();
    throw err;
  }
}

/** Environment of a `vaultgate serve` process with chain base on the evm rail as `vaultgate dev chain` prints it, on `scratch` when there is one. */
export function evmRailServiceEnv(dataDir: string, scratch: { url: string } | undefined, rpcUrl: string, usdc: Hex): Record<string, string> {
  return { DATA_DIR: dataDir, ...(scratch ? { DATABASE_URL: scratch.url } : {}), ...localChainSettings("base", rpcUrl, usdc) };
}

/** Mines one block while the token contract runs `code` instead of its own (its storage is kept), then puts its code back. */
export async function mineWithTokenCode(anvil: Anvil, usdc: Hex, code: Hex): Promise<void> {
  const own = await anvil.rpc<Hex>("eth_getCode", [usdc, "latest"]);
  await anvil.rpc("anvil_setCode", [usdc, code]);
  await anvil.mine(1);
  await anvil.rpc("anvil_setCode", [usdc, own]);
}

/** A USDC send from the hot wallet behind `rail` to a fresh address, mined: one the books never saw. Answers its hash in lower case. */
export async function sendOutsideVaultgate(anvil: Anvil, rail: EvmRail, units: bigint): Promise<string> {
  const signed = await rail.signTransfer(await rail.minedNonce(), freshAddress(), units, await rail.fees());
  await rail.broadcast(signed.rawTx);
  await anvil.mine(1);
  return signed.txHash.toLowerCase();
}

/**
 * Pays `amounts` (cents, each to a fresh address) from a fresh budget on base funded with
 * $10,000, then runs the worker, mines 2 blocks and runs it again; answers the payment ids.
 */
export async function payOnBase(stack: TestStack, anvil: Anvil, amounts: number[]): Promise<string[]> {
  const rpc = stackRpc(stack);
  const { agentToken: token } = await fundedChildBudget(stack, { fundCents: 1_000_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
  const ids = await Promise.all(
    amounts.map(async (amount) => {
      const r = await rpc("/mcp/write", token, "payments.initiate", {
        counterparty: { address: freshAddress(), chain: "base", token: "USDC" },
        amount_cents: amount,
        currency: "USD",
        idempotency_key: `p-${randomBytes(6).toString("hex")}`,
      });
      expect(r.json!.result, JSON.stringify(r.json)).to.have.property("payment_id");
      return r.json!.result.payment_id as string;
    }),
  );
  await stack.core.settlement.worker.runOnce();
  await anvil.mine(2);
  await stack.core.settlement.worker.runOnce();
  return ids;
}
