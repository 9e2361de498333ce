import { expect } from "chai";
import type { Hex } from "viem";
import { ANVIL_CHAIN_ID, freshWalletKeyFile, startAnvil, startRpcProxy, type Anvil, type RpcProxy } from "../support/anvil.js";
import { requirePostgres } from "../support/db.js";
import { evmChainSettings } from "../support/evm-rail.js";
import { startStack, type TestStack } from "../support/stack.js";

const OTHER_CHAIN_ID = 84532;

/**
 * Replicas on one database whose settings each match their own node but name two networks
 * for one hot wallet: its nonces and payments belong to one network, so only one may serve it.
 */
describe("the chain id across replicas of one database", function () {
  this.timeout(60_000);
  let anvil: Anvil;
  let usdc: Hex;
  let proxy: RpcProxy;
  const stacks: TestStack[] = [];

  before(async () => {
    anvil = await startAnvil();
    usdc = await anvil.deployUsdc();
    proxy = await startRpcProxy(anvil.url);
    proxy.retarget(anvil.url, OTHER_CHAIN_ID);
  });
  afterEach(async () => {
    await Promise.all(stacks.splice(0).map((s) => s.close()));
  });
  after(async () => {
    await proxy?.stop();
    await anvil?.stop();
  });

  /** A core paying base from `keyFile`, on anvil (its own chain id) or on the proxy reporting another one. */
  async function core(keyFile: string, network: "anvil" | "other"): Promise<TestStack> {
    const [url, chainId] = network === "anvil" ? [anvil.url, ANVIL_CHAIN_ID] : [proxy.url, OTHER_CHAIN_ID];
    const stack = await startStack({ settlement: { evm: [evmChainSettings(url, usdc, { chainId, walletKeyFile: keyFile })] }, settlementPollMs: 0 });
    stacks.push(stack);
    return stack;
  }
  const refusal = (err: Error) => err.message;

  it("a replica set for another network than the one the wallet's payments are on refuses the start, naming the setting", async () => {
    const keyFile = await freshWalletKeyFile();
    const first = await core(keyFile, "anvil");
    const wallet = first.core.settlement.evm("base")!.wallet;
    const message = await core(keyFile, "other").then(() => "started", refusal);
    expect(message).to.equal(
      `CHAIN_BASE_CHAIN_ID is ${OTHER_CHAIN_ID} but this database's base payments from hot wallet ${wallet} are on chain id ${ANVIL_CHAIN_ID}; a hot wallet pays on one network (give this one its own CHAIN_BASE_WALLET_KEY_FILE)`,
    );
    await core(keyFile, "anvil");
    await core(await freshWalletKeyFile(), "other");
  });

  it("replicas starting at once with two networks for one hot wallet: exactly one network is served (PostgreSQL only)", async function () {
    requirePostgres(this, "replicas starting at once need several connections");
    const keyFile = await freshWalletKeyFile();
    const networks = Array.from({ length: 8 }, (_, i) => (i % 2 ? "anvil" : "other") as "anvil" | "other");
    const outcomes = await Promise.all(networks.map((n) => core(keyFile, n).then(() => `started:${n}`, refusal)));
    const started = new Set(outcomes.filter((o) => o.startsWith("started:")));
    expect(started.size, outcomes.join("\n")).to.equal(1);
    const winner = [...started][0]!.slice("started:".length);
    const refused = outcomes.filter((o) => !o.startsWith("started:"));
    expect(refused).to.have.length(4);
    for (const m of refused)
      expect(m).to.match(new RegExp(`^CHAIN_BASE_CHAIN_ID is ${winner === "anvil" ? OTHER_CHAIN_ID : ANVIL_CHAIN_ID} but this database's`));
  });
});
