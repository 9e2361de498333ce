import { expect } from "chai";
import { ANVIL_CHAIN_ID, type Anvil, type RpcProxy } from "../support/anvil.js";
import { payOnBase, startAnvilWithUsdc, startProxiedEvmStack, type ProxiedEvmStack } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * `ledger verify --chains` against a node that now answers for another network (a moved load balancer, a
 * mistyped failover): that network's logs and balances say nothing of the hot wallet's, so nothing is compared.
 */
describe("books against a node switched to another network (anvil)", function () {
  this.timeout(120_000);
  let chain: ProxiedEvmStack<McpStack>;
  let other: Anvil;
  let proxy: RpcProxy;
  let stack: McpStack;

  before(async () => {
    chain = await startProxiedEvmStack(startMcpStack, 100_000);
    ({ proxy, stack } = chain);
    ({ anvil: other } = await startAnvilWithUsdc());
  });
  after(async () => {
    await chain?.stop();
    await other?.stop();
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
