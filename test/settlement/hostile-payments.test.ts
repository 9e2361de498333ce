import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Hex } from "viem";
import type { Anvil } from "../support/anvil.js";
import { createOwner, fundedChildBudget } from "../support/budgets.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";
import { freshAddress, startEvmRailStack } from "../support/evm-rail.js";

/** Code that answers 32 zero bytes to any call: a token whose transfer returns false instead of reverting. */
const ANSWERS_FALSE = "0x60206000f3";

/** A token and payees that do not behave: the worker believes only what the chain shows was paid. */
describe("a token and payees that do not behave (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let stack: McpStack;
  let usdc: Hex;

  before(async () => {
    ({ anvil, usdc, stack } = await startEvmRailStack(startMcpStack, 10_000_000));
  });
  afterEach(async () => {
    await anvil.setAutomine(true);
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const settle = () => stack.core.settlement.worker.runOnce();

  async function agent() {
    const owner = await createOwner(stack);
    const { agentToken: token } = await fundedChildBudget(stack, {
      owner,
      fundCents: 100_000n,
      budget: { display_name: "Chain budget", chain_allowlist: ["base"] },
    });
    const balance = async () => (await rpc("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents as number;
    const pay = (to: string, amount: number) =>
      rpc("/mcp/write", token, "payments.initiate", {
        counterparty: { address: to, chain: "base", token: "USDC" },
        amount_cents: amount,
        currency: "USD",
        idempotency_key: `p-${randomBytes(6).toString("hex")}`,
      });
    return { token, balance, pay };
  }

  it("a transfer mined with success but no Transfer log (the token answered false) is refunded as reverted, never completed", async () => {
    const a = await agent();
    const to = freshAddress();
    const accepted = await a.pay(to, 1_500);
    const id = accepted.json!.result.payment_id as string;
    await anvil.setAutomine(false);
    await settle(); // signed and sent, not mined yet
    const code = await anvil.rpc<Hex>("eth_getCode", [usdc, "latest"]);
    await anvil.rpc("anvil_setCode", [usdc, ANSWERS_FALSE]);
    await anvil.mine(1);
    await anvil.rpc("anvil_setCode", [usdc, code]); // its storage is kept: the balances are as before
    await anvil.mine(1);
    await settle(); // deep enough to count (2), not final (4)
    expect((await rpc("/mcp/read", a.token, "payments.get", { payment_id: id })).json!.result.status).to.equal("submitted");
    await anvil.mine(2);
    await settle();
    const got = await rpc("/mcp/read", a.token, "payments.get", { payment_id: id });
    expect(got.json!.result).to.deep.include({ status: "failed", failure_reason: "reverted" });
    expect(await anvil.usdcBalance(usdc, to)).to.equal(0n);
    expect(await a.balance()).to.equal(100_000);
    const chains = await stack.admin.audit.verifyChains({});
    expect(chains.differences.map((d) => d.message)).to.deep.equal([]);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
