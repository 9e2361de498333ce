import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { RpcProxy } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { freshAddress, startProxiedEvmStack, type ProxiedEvmStack } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/** The eth_call of a transfer's selector (USDC `transfer`): the worker's question to the token before it signs. */
const TRANSFER_CALL = /"eth_call".*a9059cbb/;

/**
 * Before it signs, the worker asks the token whether it takes the transfer. Only the token's revert
 * is a refusal: a node's internal error says nothing of the payee, so the payment is asked about again.
 */
describe("a node's error on the question to the token before signing (anvil)", function () {
  this.timeout(120_000);
  let chain: ProxiedEvmStack<McpStack>;
  let proxy: RpcProxy;
  let stack: McpStack;

  before(async () => {
    // Its own queue: a payment of another file left pending would be asked first and take the node's error.
    chain = await startProxiedEvmStack(startMcpStack, 100_000, { ownBooks: true });
    ({ proxy, stack } = chain);
  });
  after(async () => {
    await chain?.stop();
  });

  const row = async (id: string) => stack.core.db("settlement_payments").where({ payment_id: id }).first();

  async function pay(to: string, cents: number) {
    const rpc = stackRpc(stack);
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
    const r = await rpc("/mcp/write", agentToken, "payments.initiate", {
      counterparty: { address: to, chain: "base", token: "USDC" },
      amount_cents: cents,
      currency: "USD",
      idempotency_key: `p-${randomBytes(6).toString("hex")}`,
    });
    const balance = async () => (await rpc("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents as number;
    return { id: r.json!.result.payment_id as string, balance };
  }

  it("an internal error (-32603) is no refusal: the payment stays pending, unsigned, and is paid once on the next look", async () => {
    const to = freshAddress();
    const { id, balance } = await pay(to, 1_000);
    proxy.failWith(TRANSFER_CALL, { code: -32603, message: "internal error" });
    await stack.core.settlement.worker.runOnce();
    expect(await row(id)).to.deep.include({ status: "pending", nonce: null, failure_reason: null });
    expect(await balance(), "nothing refunded").to.equal(9_000);

    await stack.core.settlement.worker.runOnce();
    await chain.anvil.mine(2);
    await stack.core.settlement.worker.runOnce();
    expect((await row(id)).status).to.equal("completed");
    expect(await chain.anvil.usdcBalance(chain.usdc, to)).to.equal(centsToUnits(1_000));
    expect(await balance()).to.equal(9_000);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("a revert the node reports as one (code 3) is still the token's refusal: failed as reverted, refunded, nothing signed", async () => {
    const { id, balance } = await pay(freshAddress(), 1_000);
    proxy.failWith(TRANSFER_CALL, { code: 3, message: "execution reverted" });
    await stack.core.settlement.worker.runOnce();
    expect(await row(id)).to.deep.include({ status: "failed", nonce: null, failure_reason: "reverted" });
    expect(await balance()).to.equal(10_000);
  });
});
