import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { centsToUnits } from "../../core/settlement/rules.js";
import { startAnvil, type Anvil, type RpcProxy } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { freshAddress, startProxiedEvmStack, type ProxiedEvmStack } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * Signed payments past their expiry while the chain's node answers for another network: that node is
 * no evidence, so nothing signed is failed or refunded meanwhile, however long past its expiry.
 */
describe("signed payments past their expiry while the node is switched to another network (anvil)", function () {
  this.timeout(120_000);
  let chain: ProxiedEvmStack<McpStack>;
  let other: Anvil;
  let proxy: RpcProxy;
  let stack: McpStack;

  before(async () => {
    // Its own books: the in-flight total it checks would count other files' payments in the shared database.
    chain = await startProxiedEvmStack(startMcpStack, 100_000, { settings: { finalityBlocks: 50 }, ownBooks: true });
    ({ proxy, stack } = chain);
    other = await startAnvil();
  });
  after(async () => {
    await chain?.stop();
    await other?.stop();
  });

  const row = async (id: string) => stack.core.db("settlement_payments").where({ payment_id: id }).first();
  const settle = () => stack.core.settlement.worker.runOnce();

  it("a completed one not yet final and a submitted one stay as they are, charged; back on its network, each is paid once, never refunded", async () => {
    const rpc = stackRpc(stack);
    const { agentToken, vaultId } = await fundedChildBudget(stack, { fundCents: 10_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
    const pay = async (to: string) =>
      (
        await rpc("/mcp/write", agentToken, "payments.initiate", {
          counterparty: { address: to, chain: "base", token: "USDC" },
          amount_cents: 1_000,
          currency: "USD",
          idempotency_key: `p-${randomBytes(6).toString("hex")}`,
        })
      ).json!.result.payment_id as string;
    // Read from the vault row: the agent's token does not outlive the hour the clock moves on.
    const balance = async () => Number((await stack.core.db("vaults").where({ id: vaultId }).first()).balance_cents);
    const [toCompleted, toSubmitted] = [freshAddress(), freshAddress()];

    const completed = await pay(toCompleted);
    await settle();
    await chain.anvil.mine(2);
    await settle();
    expect(await row(completed)).to.deep.include({ status: "completed", final: false });
    await chain.anvil.setAutomine(false);
    const submitted = await pay(toSubmitted);
    await settle(); // signed, waiting in the network's pool
    expect((await row(submitted)).status).to.equal("submitted");

    proxy.retarget(other.url, 999);
    stack.clock.advance(3_600_000 + 60_000);
    for (let i = 0; i < 3; i++) await settle();
    expect([(await row(completed)).status, (await row(submitted)).status]).to.deep.equal(["completed", "submitted"]);
    expect(await balance(), "nothing refunded on another network's word").to.equal(8_000);

    proxy.retarget(chain.anvil.url);
    await chain.anvil.mine(3);
    for (let i = 0; i < 4; i++) await settle();
    expect([(await row(completed)).status, (await row(submitted)).status]).to.deep.equal(["completed", "completed"]);
    expect(await chain.anvil.usdcBalance(chain.usdc, toCompleted)).to.equal(centsToUnits(1_000));
    expect(await chain.anvil.usdcBalance(chain.usdc, toSubmitted)).to.equal(centsToUnits(1_000));
    expect(await balance(), "each paid once, charged once").to.equal(8_000);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
    expect((await stack.admin.audit.verifyChains({})).differences.map((d) => d.message)).to.deep.equal([]);
  });
});
