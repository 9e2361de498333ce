import {
  BaseError,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  createPublicClient,
  encodeFunctionData,
  erc20Abi,
  http,
  InternalRpcError,
  keccak256,
  parseEventLogs,
  type Hex,
  type PrivateKeyAccount,
  type PublicClient,
} from "viem";
import type { EvmChainSettings } from "./config.js";
import { settlementRpcErrors } from "./metrics.js";

/** Gas a USDC transfer is given (a transfer uses 35-65k); a cancellation is a plain 21k send. */
export const TRANSFER_GAS = 120_000n;
export const CANCEL_GAS = 21_000n;

export interface Fees {
  maxFeePerGas: bigint;
  priorityFee: bigint;
}

export interface Receipt {
  blockNumber: number;
  blockHash: string;
  success: boolean;
  /** The USDC Transfer logs of the transaction (lower-case addresses): what it really moved. */
  transfers: { from: string; to: string; units: bigint }[];
}

/**
 * One chain on the evm rail: the node's JSON-RPC (viem, one attempt per call within the
 * chain's timeout, each failure counted) and the hot wallet that signs. Signing is local;
 * only `broadcast` sends anything that spends.
 */
export interface EvmRail {
  settings: EvmChainSettings;
  /** The hot wallet's address, lower case. */
  wallet: string;
  /** False for a rail that only watches a wallet (see `watching`): its sign calls throw. */
  signs: boolean;
  /** The same node watching another of this chain's hot wallets, one this core has no key for: reads and sends of stored bytes only. */
  watching(address: string): EvmRail;
  chainId(): Promise<number>;
  blockNumber(): Promise<number>;
  blockHash(n: number): Promise<string | undefined>;
  /** At the latest block, or at `blockNumber` (an older block needs a node that keeps old state). */
  usdcBalance(address?: string, blockNumber?: number): Promise<bigint>;
  /** The USDC contract's decimals(); undefined when the address answers no token's decimals (no contract, or another one). */
  usdcDecimals(): Promise<number | undefined>;
  /** Transactions of the hot wallet mined so far (the next nonce the chain expects), at the head or at a block. */
  minedNonce(atBlock?: number): Promise<number>;
  /** The hot wallet's ETH for gas, in wei, at a block. */
  gasBalance(atBlock: number): Promise<bigint>;
  fees(): Promise<Fees>;
  /** Whether the token refuses this transfer (to a lower-case address) from the hot wallet at a block (an eth_call that reverts or answers false). */
  transferRefused(to: string, units: bigint, atBlock: number): Promise<boolean>;
  /** `to` in lower case, as settlement stores it: viem refuses an all-upper-case address (it has no checksum). */
  signTransfer(nonce: number, to: string, units: bigint, fees: Fees): Promise<{ rawTx: string; txHash: string }>;
  /** A 0-value send to itself with the same nonce: once mined, the transfer never can be. */
  signCancel(nonce: number, fees: Fees): Promise<{ rawTx: string; txHash: string }>;
  /** Sends signed bytes; a node that already has them (or has mined their nonce) is not an error. */
  broadcast(rawTx: string): Promise<void>;
  receipt(txHash: string): Promise<Receipt | undefined>;
  /** The hot wallet's transaction with `nonce` in block `n`, read from the block itself (no transaction index): its hash (lower case) and the chain id it was signed for. */
  walletTransactionIn(n: number, nonce: number): Promise<{ hash: string; chainId: number | undefined } | undefined>;
  /** USDC Transfer logs from or to the hot wallet in blocks [fromBlock, toBlock]. */
  transfers(fromBlock: number, toBlock: number): Promise<UsdcTransfer[]>;
}

export interface UsdcTransfer {
  txHash: string;
  logIndex: number;
  blockNumber: number;
  from: string;
  to: string;
  units: bigint;
}

/** A node's refusal of a send because the wallet cannot pay its gas: the node never took the transaction. */
export function refusedForGas(err: unknown): boolean {
  const e = err as { message?: unknown; details?: unknown; name?: unknown };
  return e?.name === "InsufficientFundsError" || /insufficient funds/i.test(`${String(e?.message ?? "")} ${String(e?.details ?? "")}`);
}

export function createEvmRail(settings: EvmChainSettings, account: PrivateKeyAccount): EvmRail {
  const client: PublicClient = createPublicClient({ transport: http(settings.rpcUrl, { timeout: settings.rpcTimeoutMs, retryCount: 0 }) });
  return railOf(settings, client, account.address.toLowerCase(), account);
}

/** The rail of `wallet` on the node `client` talks to; without `account` it watches and never signs. */
function railOf(settings: EvmChainSettings, client: PublicClient, wallet: string, account?: PrivateKeyAccount): EvmRail {
  async function rpc<T>(method: string, call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (err) {
      settlementRpcErrors.inc({ chain: settings.chain, method });
      throw err;
    }
  }

  /** The rails watching other wallets on this node, made once each (a chain lists at most 32 retired wallets). */
  const watched = new Map<string, EvmRail>();

  async function sign(tx: { nonce: number; to: Hex; data?: Hex; gas: bigint; fees: Fees }) {
    if (!account) throw new Error(`chain ${settings.chain}: this core holds no key for hot wallet ${wallet}`);
    const rawTx = await account.signTransaction({
      type: "eip1559",
      chainId: settings.chainId,
      nonce: tx.nonce,
      to: tx.to,
      value: 0n,
      data: tx.data,
      gas: tx.gas,
      maxFeePerGas: tx.fees.maxFeePerGas,
      maxPriorityFeePerGas: tx.fees.priorityFee,
    });
    return { rawTx, txHash: keccak256(rawTx) };
  }

  return {
    settings,
    wallet,
    signs: account !== undefined,
    watching(address) {
      const a = address.toLowerCase();
      let rail = watched.get(a);
      if (!rail) watched.set(a, (rail = railOf(settings, client, a)));
      return rail;
    },
    chainId: () => rpc("eth_chainId", () => client.getChainId()),
    blockNumber: () => rpc("eth_blockNumber", async () => Number(await client.getBlockNumber({ cacheTime: 0 }))),
    blockHash: (n) =>
      rpc("eth_getBlockByNumber", async () => {
        try {
          return (await client.getBlock({ blockNumber: BigInt(n) })).hash ?? undefined;
        } catch (err) {
          if ((err as Error).name === "BlockNotFoundError") return undefined;
          throw err;
        }
      }),
    usdcBalance: (address, blockNumber) =>
      rpc("eth_call", () =>
        client.readContract({
          address: settings.usdc,
          abi: erc20Abi,
          functionName: "balanceOf",
          args: [(address ?? wallet) as Hex],
          ...(blockNumber === undefined ? {} : { blockNumber: BigInt(blockNumber) }),
        }),
      ),
    usdcDecimals: () =>
      rpc("eth_call", async () => {
        try {
          return await client.readContract({ address: settings.usdc, abi: erc20Abi, functionName: "decimals" });
        } catch (err) {
          const notToken = (e: unknown) => e instanceof ContractFunctionZeroDataError || e instanceof ContractFunctionRevertedError;
          if (err instanceof BaseError && err.walk(notToken)) return undefined;
          throw err;
        }
      }),
    gasBalance: (atBlock) => rpc("eth_getBalance", () => client.getBalance({ address: wallet as Hex, blockNumber: BigInt(atBlock) })),
    minedNonce: (atBlock) =>
      rpc("eth_getTransactionCount", () =>
        client.getTransactionCount(
          atBlock === undefined ? { address: wallet as Hex, blockTag: "latest" } : { address: wallet as Hex, blockNumber: BigInt(atBlock) },
        ),
      ),
    fees: () =>
      rpc("eth_feeHistory", async () => {
        const f = await client.estimateFeesPerGas({ chain: null, type: "eip1559" });
        return { maxFeePerGas: f.maxFeePerGas, priorityFee: f.maxPriorityFeePerGas };
      }),
    transferRefused: (to, units, atBlock) =>
      rpc("eth_call", async () => {
        try {
          const { result } = await client.simulateContract({
            address: settings.usdc,
            abi: erc20Abi,
            functionName: "transfer",
            args: [to as Hex, units],
            account: wallet as Hex,
            blockNumber: BigInt(atBlock),
          });
          return !result;
        } catch (err) {
          const revert =
            err instanceof BaseError ? (err.walk((e) => e instanceof ContractFunctionRevertedError) as ContractFunctionRevertedError | null) : null;
          // A node's internal error (-32603) with no revert data is no word of the token's: the call is asked again.
          if (revert && (revert.raw !== undefined || !(err as BaseError).walk((e) => e instanceof InternalRpcError))) return true;
          throw err;
        }
      }),
    signTransfer: (nonce, to, units, fees) =>
      sign({
        nonce,
        to: settings.usdc,
        data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [to as Hex, units] }),
        gas: TRANSFER_GAS,
        fees,
      }),
    signCancel: (nonce, fees) => sign({ nonce, to: wallet as Hex, gas: CANCEL_GAS, fees }),
    async broadcast(rawTx) {
      try {
        await rpc("eth_sendRawTransaction", () => client.sendRawTransaction({ serializedTransaction: rawTx as Hex }));
      } catch (err) {
        const text = `${(err as Error).message ?? ""} ${String((err as { details?: unknown }).details ?? "")}`.toLowerCase();
        if (/already known|already imported|known transaction|nonce too low|replacement transaction underpriced|already exists/.test(text)) return;
        throw err;
      }
    },
    transfers: (fromBlock, toBlock) =>
      rpc("eth_getLogs", async () => {
        const range = {
          address: settings.usdc,
          abi: erc20Abi,
          eventName: "Transfer" as const,
          fromBlock: BigInt(fromBlock),
          toBlock: BigInt(toBlock),
          strict: true as const,
        };
        const [out, into] = await Promise.all([
          client.getContractEvents({ ...range, args: { from: wallet as Hex } }),
          client.getContractEvents({ ...range, args: { to: wallet as Hex } }),
        ]);
        const seen = new Map<string, UsdcTransfer>();
        for (const l of [...out, ...into]) {
          seen.set(`${l.transactionHash}:${l.logIndex}`, {
            txHash: l.transactionHash.toLowerCase(),
            logIndex: l.logIndex,
            blockNumber: Number(l.blockNumber),
            from: l.args.from.toLowerCase(),
            to: l.args.to.toLowerCase(),
            units: l.args.value,
          });
        }
        return [...seen.values()];
      }),
    walletTransactionIn: (n, nonce) =>
      rpc("eth_getBlockByNumber", async () => {
        const block = await client.getBlock({ blockNumber: BigInt(n), includeTransactions: true });
        const t = block.transactions.find((t) => t.from.toLowerCase() === wallet && t.nonce === nonce);
        return t && { hash: t.hash.toLowerCase(), chainId: t.chainId };
      }),
    receipt: (txHash) =>
      rpc("eth_getTransactionReceipt", async () => {
        try {
          const r = await client.getTransactionReceipt({ hash: txHash as Hex });
          const usdc = settings.usdc.toLowerCase();
          const transfers = parseEventLogs({ abi: erc20Abi, eventName: "Transfer", logs: r.logs, strict: true })
            .filter((l) => l.address.toLowerCase() === usdc)
            .map((l) => ({ from: l.args.from.toLowerCase(), to: l.args.to.toLowerCase(), units: l.args.value }));
          return { blockNumber: Number(r.blockNumber), blockHash: r.blockHash, success: r.status === "success", transfers };
        } catch (err) {
          if ((err as Error).name === "TransactionReceiptNotFoundError") return undefined;
          throw err;
        }
      }),
  };
}
