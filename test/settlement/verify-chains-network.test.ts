import { expect } from "chai";
import { centsToUnits } from "../../core/settlement/rules.js";
import { ANVIL_CHAIN_ID, startRpcProxy, type Anvil } from "../support/anvil.js";
import { evmRailStackOptions, fundHotWallet, payOnBase, startAnvilWithUsdc, startEvmChain, type EvmChain } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * `ledger verify --chains` against a node that now answers for another network (a moved load balancer, a
 * mistyped failover): that network's logs and balances say nothing of the hot wallet's, so nothing is compared.
 */
describe("books against a node switched to another network (anvil)", function () {
  this.timeout(120_000);
  let chain: EvmChain;
  let other: Anvil;
  let proxy: Awaited<ReturnType<typeof startRpcProxy>>;
  let stack: McpStack;

  before(async () => {
    chain = await startEvmChain();
    ({ anvil: other } = await startAnvilWithUsdc());
    proxy = await startRpcProxy(chain.anvil.url);
    stack = await startMcpStack(evmRailStackOptions({ ...chain.settings, rpcUrl: proxy.url }));
    await fundHotWallet(chain.anvil, chain.usdc, stack.core.settlement.evm("base")!.wallet, centsToUnits(100_000));
  });
  after(async () => {
    await stack?.close();
    await proxy?.stop();
    await other?.stop();
    await chain?.anvil.stop();
  });

  it("is one difference naming both chain ids, never a pass; back on its own network, the books are clean", async () => {
    await payOnBase(stack, chain.anvil, [1_500, 250]);
    expect((await stack.admin.audit.verifyChains({})).differences.map((d) => d.message)).to.deep.equal([]);
    // The other network has a token at the same address and blocks short of the payments': read, it would pass.
    proxy.retarget(other.url, 999);
    try {
      const r = await stack.admin.audit.verifyChains({});
      expect(r.ok).to.equal(false);
      expect(r.differences.map((d) => ({ check: d.check, message: d.message }))).to.deep.equal([
        {
          check: "chain_id_mismatch",
          message: `base: the node reports chain id 999 but CHAIN_BASE_CHAIN_ID is ${ANVIL_CHAIN_ID}; nothing was compared`,
        },
      ]);
    } finally {
      proxy.retarget(chain.anvil.url);
    }
    expect((await stack.admin.audit.verifyChains({})).differences.map((d) => d.message)).to.deep.equal([]);
  });
});
