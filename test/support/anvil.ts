import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createPublicClient, createWalletClient, http as viemHttp, erc20Abi, type Hex, type PublicClient } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { ANVIL_CHAIN_ID, ANVIL_DEPLOYER_KEY, anvilChain, spawnAnvil } from "../../cli/local-chain.js";
import { usdcArtifact } from "../../cli/usdc-contract.js";
import { freePort } from "./ports.js";

export { ANVIL_CHAIN_ID };

export interface Anvil {
  url: string;
  port: number;
  client: PublicClient;
  rpc<T = unknown>(method: string, params?: unknown[]): Promise<T>;
  mine(blocks?: number): Promise<void>;
  setAutomine(on: boolean): Promise<void>;
  /** Deploys contracts/USDC.sol; answers its address. */
  deployUsdc(): Promise<Hex>;
  mintUsdc(usdc: Hex, to: string, units: bigint): Promise<void>;
  usdcBalance(usdc: Hex, of: string): Promise<bigint>;
  /** A USDC transfer signed with `key` outside Vaultgate (an operator's own send), mined. */
  transferUsdc(usdc: Hex, key: Hex, to: string, units: bigint): Promise<void>;
  /** Gives an address ETH for gas. */
  fundGas(address: string, wei?: bigint): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a local anvil (block time 0: a block per transaction) on a free port; resolves once it answers. */
export async function startAnvil(options: { port?: number } = {}): Promise<Anvil> {
  const port = options.port ?? (await freePort());
  const { child, url } = await spawnAnvil(port, [], ["ignore", "ignore", "pipe"]);
  const rpc = async <T>(method: string, params: unknown[] = []): Promise<T> => {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
    });
    const body = (await res.json()) as { result?: T; error?: { message: string } };
    if (body.error) throw new Error(`${method}: ${body.error.message}`);
    return body.result as T;
  };
  const client = createPublicClient({ transport: viemHttp(url) }) as PublicClient;
  const deployer = privateKeyToAccount(ANVIL_DEPLOYER_KEY);
  const wallet = createWalletClient({ account: deployer, transport: viemHttp(url) });
  const chain = anvilChain(url);
  return {
    url,
    port,
    client,
    rpc,
    mine: (blocks = 1) => rpc("anvil_mine", [`0x${blocks.toString(16)}`]).then(() => undefined),
    setAutomine: (on) => rpc("evm_setAutomine", [on]).then(() => undefined),
    async deployUsdc() {
      const { abi, bytecode } = await usdcArtifact();
      const hash = await wallet.deployContract({ abi, bytecode, chain });
      await rpc("anvil_mine", ["0x1"]).catch(() => {});
      const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
      return receipt.contractAddress!;
    },
    async mintUsdc(usdc, to, units) {
      const { abi } = await usdcArtifact();
      const hash = await wallet.writeContract({ address: usdc, abi, functionName: "mint", args: [to, units], chain });
      await rpc("anvil_mine", ["0x1"]).catch(() => {});
      await client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    },
    async transferUsdc(usdc, key, to, units) {
      const sender = createWalletClient({ account: privateKeyToAccount(key), transport: viemHttp(url) });
      const hash = await sender.writeContract({ address: usdc, abi: erc20Abi, functionName: "transfer", args: [to as Hex, units], chain });
      await rpc("anvil_mine", ["0x1"]).catch(() => {});
      await client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    },
    usdcBalance: (usdc, of) => client.readContract({ address: usdc, abi: erc20Abi, functionName: "balanceOf", args: [of as Hex] }),
    fundGas: (address, wei = 10n ** 20n) => rpc("anvil_setBalance", [address, `0x${wei.toString(16)}`]).then(() => undefined),
    async stop() {
      if (child.exitCode !== null) return;
      const gone = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await gone;
    },
  };
}

export type ProxyMode = "pass" | "stall" | "stall-send" | "no-receipts" | "behind" | "stale-head";

/** Requests a proxy keeps (unanswered, not forwarded) until `release`; `answered(m)` resolves on the next answer to method m. */
export interface ProxyHold {
  arrived: Promise<void>;
  answered(method: string): Promise<void>;
  release(): void;
}

/**
 * A JSON-RPC proxy in front of a node: it can stall everything or only eth_sendRawTransaction (read,
 * never answered or forwarded), answer every receipt with null (no transaction index), or every
 * receipt and block by number with null (a node behind the head), or the head as block 1 (a stale replica).
 */
export async function startRpcProxy(target: string): Promise<{
  url: string;
  mode: ProxyMode;
  /** Another node to forward to, and the chain id to report in place of its own (a switched network). */
  retarget(url: string, chainId?: number): void;
  hold(pattern: RegExp): ProxyHold;
  /** Answers the next `times` requests matching `pattern` with this JSON-RPC error, never forwarding them. */
  failWith(pattern: RegExp, error: { code: number; message: string }, times?: number): void;
  /** How many calls of `method` arrived so far (each call of a batch counts). */
  count(method: string): number;
  stop(): Promise<void>;
}> {
  const counts = new Map<string, number>();
  const stalled = new Set<http.ServerResponse>();
  const state = { mode: "pass" as ProxyMode, target, chainId: undefined as number | undefined };
  const holds: { pattern: RegExp; arrive(): void; released: Promise<void> }[] = [];
  const onAnswer: ((method: string) => void)[] = [];
  const failures: { pattern: RegExp; error: { code: number; message: string }; left: number }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString();
      for (const { method } of [JSON.parse(body)].flat() as { method: string }[]) counts.set(method, (counts.get(method) ?? 0) + 1);
      const failure = failures.find((f) => f.left > 0 && f.pattern.test(body));
      if (failure) {
        failure.left--;
        const { id } = JSON.parse(body) as { id: unknown };
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id, error: failure.error }));
        return;
      }
      const held = holds.find((h) => h.pattern.test(body));
      if (held) {
        held.arrive();
        void held.released.then(() => forward(body, res));
        return;
      }
      if (state.chainId !== undefined && body.includes('"eth_chainId"')) {
        const { id } = JSON.parse(body) as { id: unknown };
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id, result: `0x${state.chainId.toString(16)}` }));
        return;
      }
      const isSend = body.includes("eth_sendRawTransaction");
      if (state.mode === "stall" || (state.mode === "stall-send" && isSend)) {
        stalled.add(res);
        return;
      }
      if (state.mode === "stale-head" && body.includes('"eth_blockNumber"')) {
        const { id } = JSON.parse(body) as { id: unknown };
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id, result: "0x1" }));
        return;
      }
      const hidden = state.mode === "behind" ? /eth_getTransactionReceipt|eth_getBlockByNumber/ : /eth_getTransactionReceipt/;
      if ((state.mode === "no-receipts" || state.mode === "behind") && hidden.test(body)) {
        const { id } = JSON.parse(body) as { id: unknown };
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id, result: null }));
        return;
      }
      forward(body, res);
    });
  });
  function forward(body: string, res: http.ServerResponse) {
    fetch(state.target, { method: "POST", headers: { "content-type": "application/json" }, body })
      .then(async (r) => {
        res.writeHead(r.status, { "content-type": "application/json" });
        res.end(await r.text());
        const { method } = JSON.parse(body) as { method?: string };
        for (const listener of onAnswer) listener(method ?? "");
      })
      .catch(() => res.destroy());
  }
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get mode() {
      return state.mode;
    },
    set mode(m: ProxyMode) {
      state.mode = m;
    },
    retarget(url, chainId) {
      state.target = url;
      state.chainId = chainId;
    },
    failWith(pattern, error, times = 1) {
      failures.push({ pattern, error, left: times });
    },
    count: (method) => counts.get(method) ?? 0,
    hold(pattern) {
      let arrive = () => {};
      let release = () => {};
      const arrived = new Promise<void>((resolve) => (arrive = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      holds.push({ pattern, arrive, released });
      const seen = new Set<string>();
      const waiting = new Map<string, () => void>();
      onAnswer.push((method) => {
        seen.add(method);
        waiting.get(method)?.();
      });
      return {
        arrived,
        answered: (method) => (seen.has(method) ? Promise.resolve() : new Promise<void>((resolve) => waiting.set(method, resolve))),
        release() {
          holds.splice(0);
          release();
        },
      };
    },
    async stop() {
      for (const res of stalled) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export type RpcProxy = Awaited<ReturnType<typeof startRpcProxy>>;

/**
 * A key file holding a fresh hot wallet key, for a core under test: cores of one test
 * process share the per-process key of a chain otherwise, and with it its nonces.
 */
export async function freshWalletKeyFile(): Promise<string> {
  const { mkdtemp, writeFile } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const { randomBytes } = await import("node:crypto");
  const dir = await mkdtemp(join(tmpdir(), "vg-hot-wallet-"));
  const file = join(dir, "wallet.key");
  await writeFile(file, `0x${randomBytes(32).toString("hex")}\n`, { mode: 0o600 });
  return file;
}
