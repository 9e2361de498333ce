import { expect } from "chai";
import type { EvmChainSettings } from "../../core/settlement/config.js";
import { getContractAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { ANVIL_DEPLOYER_KEY } from "../../cli/local-chain.js";
import { ANVIL_CHAIN_ID, freshWalletKeyFile, startAnvil, type Anvil } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { evmChainSettings, freshAddress } from "../support/evm-rail.js";
import { startMcpStack } from "../support/mcp.js";
import { startStack } from "../support/stack.js";
import { freePort } from "../support/ports.js";

const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";

const chain = (port: number, over: Partial<EvmChainSettings> = {}): EvmChainSettings =>
  evmChainSettings(`http://127.0.0.1:${port}`, USDC, { confirmations: 1, rpcTimeoutMs: 500, ...over });

describe("settlement at start", function () {
  this.timeout(60_000);
  let anvil: Anvil | undefined;
  afterEach(async () => {
    await anvil?.stop();
    anvil = undefined;
  });

  it("a chain whose node does not answer starts core not ready, naming settlement in /readyz, and ready once the node answers", async () => {
    const port = await freePort();
    // Where anvil's first deployment lands: the USDC deployed once the node is up.
    const usdc = getContractAddress({ from: privateKeyToAccount(ANVIL_DEPLOYER_KEY).address, nonce: 0n });
    const stack = await startStack({ gateway: true, settlement: { evm: [chain(port, { usdc })] }, settlementPollMs: 0 });
    try {
      const before = await fetch(`${stack.url}/readyz`);
      expect(before.status).to.equal(503);
      expect(((await before.json()) as { failing: string[] }).failing).to.deep.equal(["settlement"]);
      anvil = await startAnvil({ port });
      expect((await anvil.deployUsdc()).toLowerCase()).to.equal(usdc.toLowerCase());
      // Readiness answers from what core knows and asks the node again behind it, as a probe polls.
      let status = 0;
      for (let i = 0; i < 200 && status !== 200; i++) {
        if (i > 0) await new Promise((resolve) => setTimeout(resolve, 50));
        status = (await fetch(`${stack.url}/readyz`)).status;
      }
      expect(status).to.equal(200);
    } finally {
      await stack.close();
    }
  });

  it("a node reporting another chain id refuses the start, naming the setting", async () => {
    anvil = await startAnvil();
    let message = "";
    await startStack({ settlement: { evm: [chain(anvil.port, { chainId: 8453 })] }, settlementPollMs: 0 }).then(
      (s) => s.close(),
      (err: Error) => (message = err.message),
    );
    expect(message).to.equal(`CHAIN_BASE_CHAIN_ID is 8453 but the node at CHAIN_BASE_RPC_URL reports chain id ${ANVIL_CHAIN_ID}`);
  });

  it("a USDC setting that names no token contract on the node refuses the start, naming the setting", async () => {
    anvil = await startAnvil();
    const nothing = freshAddress();
    let message = "";
    await startStack({ settlement: { evm: [chain(anvil.port, { usdc: nothing, walletKeyFile: await freshWalletKeyFile() })] }, settlementPollMs: 0 }).then(
      (s) => s.close(),
      (err: Error) => (message = err.message),
    );
    expect(message).to.equal(`CHAIN_BASE_USDC is ${nothing}, which on chain id ${ANVIL_CHAIN_ID} is no token contract; USDC is a 6-decimal token`);
  });

  it("a chain whose node never answered still refunds its unsigned payments once they expire; nothing is signed", async () => {
    const stack = await startMcpStack({ settlement: { evm: [chain(await freePort())] }, settlementPollMs: 0 });
    try {
      const rpc = stackRpc(stack);
      const { agentToken: token } = await fundedChildBudget(stack, { fundCents: 10_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
      const accepted = await rpc("/mcp/write", token, "payments.initiate", {
        counterparty: { address: freshAddress(), chain: "base", token: "USDC" },
        amount_cents: 2_500,
        currency: "USD",
        idempotency_key: "node-down-payment",
      });
      expect(accepted.json!.result, accepted.text).to.deep.include({ kind: "accepted", status: "pending" });
      const id = accepted.json!.result.payment_id as string;
      await stack.core.settlement.worker.runOnce();
      expect((await rpc("/mcp/read", token, "payments.get", { payment_id: id })).json!.result.status).to.equal("pending");
      stack.clock.advance(3_601_000);
      await stack.core.settlement.worker.runOnce();
      const got = (await rpc("/mcp/read", token, "payments.get", { payment_id: id })).json!.result;
      expect(got).to.deep.include({ status: "failed", failure_reason: "expired", tx_hash: null });
      expect((await rpc("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents).to.equal(10_000);
      expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
    } finally {
      await stack.close();
    }
  });

  it("two chains on one network paying from one hot wallet refuse the start; on one network with their own wallets they start", async () => {
    anvil = await startAnvil();
    const usdc = await anvil.deployUsdc();
    const keyFile = await freshWalletKeyFile();
    const both = (eth: string | undefined) => [
      chain(anvil!.port, { usdc, walletKeyFile: keyFile }),
      chain(anvil!.port, { chain: "eth", usdc, walletKeyFile: eth }),
    ];
    let message = "";
    await startStack({ settlement: { evm: both(keyFile) }, settlementPollMs: 0 }).then(
      (s) => s.close(),
      (err: Error) => (message = err.message),
    );
    expect(message).to.match(/^CHAIN_BASE_CHAIN_ID and CHAIN_ETH_CHAIN_ID are both 31337, with one hot wallet/);
    const apart = await startStack({ settlement: { evm: both(await freshWalletKeyFile()) }, settlementPollMs: 0 });
    await apart.close();
  });
});
