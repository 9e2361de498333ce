import { expect } from "chai";
import type { EvmChainSettings } from "../../core/settlement/config.js";
import { ANVIL_CHAIN_ID, startAnvil, type Anvil } from "../support/anvil.js";
import { evmChainSettings } from "../support/evm-rail.js";
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
    const stack = await startStack({ gateway: true, settlement: { evm: [chain(port)] }, settlementPollMs: 0 });
    try {
      const before = await fetch(`${stack.url}/readyz`);
      expect(before.status).to.equal(503);
      expect(((await before.json()) as { failing: string[] }).failing).to.deep.equal(["settlement"]);
      anvil = await startAnvil({ port });
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
});
