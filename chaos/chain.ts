/** The campaign's chain: anvil (1 s blocks, state in a file so it can restart), USDC, a funded
 * shared hot wallet, and a JSON-RPC proxy that can stall, lose answers or hold a broadcast. */
import type { ChildProcess } from "node:child_process";
import http from "node:http";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createPublicClient, keccak256, http as viemHttp, type Hex, type PublicClient } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { deployLocalUsdc, fundLocalWallet, localChainSettings, spawnAnvil } from "../cli/local-chain.js";
import { freePort } from "../test/support/ports.js";
import type { Rng } from "./rng.js";

export const CHAIN = "eth";
export const CONFIRMATIONS = 2;
export const FINALITY_BLOCKS = 16;
export const EXPIRY_SECONDS = 40;
export const RPC_TIMEOUT_MS = 2000;
/** What the hot wallet is funded with: far more than every budget together can spend. */
export const FUNDING_UNITS = 1_000_000n * 1_000_000n;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export type ProxyMode = "pass" | "stall" | "lose_answers";
/** Sees each request (before it is forwarded) and each answer; "hold" keeps a request from the node. */
export type ProxyTap = (replica: string, methods: string[], phase: "request" | "answered", body: unknown) => "hold" | undefined;

export class Chain {
  child: ChildProcess | undefined;
  up = false;
  /** The head when the node last started: anvil loses state when a reorg reaches back past it. */
  startHead = 0;
  readonly url: string;
  usdc: Hex = "0x";
  wallet = "";
  client: PublicClient;
  mode: ProxyMode = "pass";
  tap: ProxyTap | undefined;
  /** Hashes of every raw transaction the proxy passed to the node. */
  readonly broadcast = new Set<string>();
  private held = new Set<http.ServerResponse>();
  private proxy: http.Server | undefined;
  private proxyBase = "";

  constructor(
    readonly port: number,
    private readonly dir: string,
  ) {
    this.url = `http://127.0.0.1:${port}`;
    this.client = createPublicClient({ transport: viemHttp(this.url) }) as PublicClient;
  }

  /** The RPC URL a replica is given: the proxy, with the replica's name as the path. */
  rpcUrlFor(replica: string): string {
    return `${this.proxyBase}/${replica}`;
  }

  async rpc<T = unknown>(method: string, params: unknown[] = []): Promise<T> {
    const res = await fetch(this.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
      signal: AbortSignal.timeout(10_000),
    });
    const body = (await res.json()) as { result?: T; error?: { message: string } };
    if (body.error) throw new Error(`${method}: ${body.error.message}`);
    return body.result as T;
  }

  /** Starts anvil from its state file (if any); it dumps its state there when stopped. */
  async start(): Promise<void> {
    // Historical states let anvil_reorg reach back across a restart.
    const args = ["--block-time", "1", "--state", join(this.dir, "anvil-state.json"), "--preserve-historical-states"];
    const { child } = await spawnAnvil(this.port, args, "ignore", 20_000);
    this.child = child;
    child.once("exit", () => (this.up = false));
    this.startHead = Number(await this.rpc<string>("eth_blockNumber"));
    this.up = true;
  }

  /** SIGTERM: anvil writes its state file, then exits. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    await gone;
    clearTimeout(timer);
    this.up = false;
  }

  /** Deploys USDC, funds the hot wallet (USDC and gas) and buries that under blocks no reorg reaches. */
  async setup(walletKey: Hex): Promise<void> {
    this.usdc = await deployLocalUsdc(this.url, 100);
    this.wallet = privateKeyToAccount(walletKey).address.toLowerCase();
    await fundLocalWallet(this.url, this.usdc, this.wallet, FUNDING_UNITS, 10n ** 22n, 100);
    await this.rpc("anvil_mine", ["0x20"]);
  }

  /** Stops the node, keeps it down, starts it again from its state file. */
  async restart(downMs: number): Promise<void> {
    await this.stop();
    await sleep(downMs);
    await this.start();
  }

  /** Ends every fault: the node runs and mines, the proxy passes everything and drops what it held. */
  async heal(): Promise<void> {
    this.tap = undefined;
    this.release();
    if (!this.up) await this.start();
    await this.rpc("evm_setIntervalMining", [1]);
  }

  /** Drops every request or answer the proxy holds (the replicas see a reset connection). */
  release(): void {
    this.mode = "pass";
    for (const res of this.held) res.destroy();
    this.held.clear();
  }

  async startProxy(): Promise<void> {
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => void this.forward(req.url ?? "/", Buffer.concat(chunks).toString(), res));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    this.proxy = server;
    this.proxyBase = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  }

  private async forward(path: string, text: string, res: http.ServerResponse): Promise<void> {
    const replica = path.replace(/^\//, "");
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const calls = (Array.isArray(body) ? body : [body]) as { method?: string; params?: unknown[] }[];
    const methods = calls.map((c) => String(c?.method));
    if (this.mode === "stall" || this.tap?.(replica, methods, "request", body) === "hold") {
      this.held.add(res);
      return;
    }
    for (const c of calls) if (c?.method === "eth_sendRawTransaction") this.broadcast.add(keccak256(c.params![0] as Hex));
    let answer: string;
    try {
      const r = await fetch(this.url, { method: "POST", headers: { "content-type": "application/json" }, body: text, signal: AbortSignal.timeout(15_000) });
      answer = await r.text();
    } catch {
      res.destroy();
      return;
    }
    // The node acted, but its answer is lost: the replica times out.
    const mode: ProxyMode = this.mode; // changed while the node answered
    if (mode !== "pass") {
      this.held.add(res);
      return;
    }
    res.writeHead(200, { "content-type": "application/json" }).end(answer);
    this.tap?.(replica, methods, "answered", body);
  }

  async close(): Promise<void> {
    this.release();
    this.proxy?.closeAllConnections();
    await new Promise<void>((r) => (this.proxy ? this.proxy.close(() => r()) : r()));
    await this.stop();
  }
}

/** Starts the node and proxy, deploys USDC and funds a hot wallet whose key file the replicas share. */
export async function startChain(dir: string, rng: Rng): Promise<{ chain: Chain; keyFile: string }> {
  const chain = new Chain(await freePort(), dir);
  await chain.start();
  const key = `0x${rng.hex(64)}` as Hex;
  const keyFile = join(dir, "hot-wallet.key");
  await writeFile(keyFile, `${key}\n`, { mode: 0o600 });
  await chain.setup(key);
  await chain.startProxy();
  return { chain, keyFile };
}

/** A replica's settings for the evm rail of the campaign's chain. */
export function chainEnv(chain: Chain, keyFile: string, replica: string): Record<string, string> {
  const p = `CHAIN_${CHAIN.toUpperCase()}_`;
  return {
    ...localChainSettings(CHAIN, chain.rpcUrlFor(replica), chain.usdc),
    [`${p}CONFIRMATIONS`]: String(CONFIRMATIONS),
    [`${p}FINALITY_BLOCKS`]: String(FINALITY_BLOCKS),
    [`${p}EXPIRY_SECONDS`]: String(EXPIRY_SECONDS),
    [`${p}RPC_TIMEOUT_MS`]: String(RPC_TIMEOUT_MS),
    [`${p}WALLET_KEY_FILE`]: keyFile,
    // The payers' amounts start at 1 cent: the campaign checks the books, not the minimum.
    [`${p}MIN_AMOUNT_CENTS`]: "1",
  };
}

/** The campaign's chain and what its faults hit, printed in the summary. */
export interface ChainRun {
  chain: Chain;
  keyFile: string;
  /** Counterparty addresses of evm payments (lower case). */
  counterparties: string[];
  stats: Record<string, number>;
  /** Transfers whose first broadcast was held while the replica that stored them was killed. */
  heldAtKill: { replica: string; txHash: string }[];
}
