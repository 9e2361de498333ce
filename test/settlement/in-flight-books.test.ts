import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { Anvil } from "../support/anvil.js";
import { fundedChildBudget } from "../support/budgets.js";
import { ownDatabase } from "../support/db.js";
import { freshAddress, startEvmRailStack } from "../support/evm-rail.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";

/** `ledger verify` holds the in-flight account to the payments on their way to a chain. */
describe("ledger verify and money in flight (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let stack: McpStack;
  // Its own books: the totals it checks would count other files' payments in the shared database.
  let books: Awaited<ReturnType<typeof ownDatabase>>;

  before(async () => {
    books = await ownDatabase();
    ({ anvil, stack } = await startEvmRailStack(startMcpStack, 100_000, { database: books.db }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
    await books?.drop();
  });

  const discrepancies = async () => (await stack.admin.audit.verifyLedger({})).discrepancies.map((d) => ({ check: d.check, message: d.message }));

  it("balances while a payment is pending, submitted and completed, and names a payment whose status left the books behind", async () => {
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
    const accepted = await postRpc(
      `${stack.url}/mcp/write`,
      {
        jsonrpc: "2.0",
        id: 1,
        method: "payments.initiate",
        params: {
          counterparty: { address: freshAddress(), chain: "base", token: "USDC" },
          amount_cents: 1_500,
          currency: "USD",
          idempotency_key: `p-${randomBytes(6).toString("hex")}`,
        },
      },
      { authorization: `Bearer ${agentToken}` },
    );
    const id = accepted.json!.result.payment_id as string;
    const status = async () => (await stack.core.db("settlement_payments").where({ payment_id: id }).first()).status as string;
    expect(await status()).to.equal("pending");
    expect(await discrepancies()).to.deep.equal([]);

    await stack.core.settlement.worker.runOnce();
    expect(await status()).to.equal("submitted");
    expect(await discrepancies()).to.deep.equal([]);

    // A status moved without its ledger movement: the in-flight account still holds the amount.
    await stack.core.db("settlement_payments").where({ payment_id: id }).update({ status: "failed" });
    expect(await discrepancies()).to.deep.equal([
      {
        check: "in_flight_mismatch",
        message: "payments on their way to a chain total 0 USD but the in-flight account's postings sum to 1500",
      },
    ]);
    await stack.core.db("settlement_payments").where({ payment_id: id }).update({ status: "submitted" });

    await anvil.mine(2);
    await stack.core.settlement.worker.runOnce();
    expect(await status()).to.equal("completed");
    expect(await discrepancies()).to.deep.equal([]);
  });
});
