import { expect } from "chai";
import { parseSettlementSettings } from "../../core/settlement/config.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { testDatabase } from "../support/db.js";
import { evmChainSettings, freshAddress } from "../support/evm-rail.js";
import { startMcpStack } from "../support/mcp.js";
import { freePort } from "../support/ports.js";
import type { TestStack } from "../support/stack.js";

const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";

/**
 * Every transfer on an evm chain costs the platform gas, so a chain takes payments from its minimum
 * (CHAIN_<NAME>_MIN_AMOUNT_CENTS, one dollar unless set); the sandbox rail has none.
 */
describe("the smallest payment an evm chain takes", function () {
  this.timeout(60_000);
  let stack: TestStack | undefined;
  afterEach(async () => {
    await stack?.close();
    stack = undefined;
  });

  // The node never answers: the minimum is checked when a payment is accepted, before anything reaches a chain.
  const start = async (minAmountCents: number | undefined, database?: Awaited<ReturnType<typeof testDatabase>>["db"]) =>
    startMcpStack({
      settlement: { evm: [evmChainSettings(`http://127.0.0.1:${await freePort()}`, USDC, { rpcTimeoutMs: 500, minAmountCents })] },
      settlementPollMs: 0,
      ...(database ? { database } : {}),
    });
  const payee = freshAddress();
  const pay = (s: TestStack, token: string, chain: string, amountCents: number, key: string) =>
    stackRpc(s)("/mcp/write", token, "tools/call", {
      name: "payments.initiate",
      arguments: { counterparty: { address: payee, chain, token: "USDC" }, amount_cents: amountCents, currency: "USD", idempotency_key: key },
    });
  const budget = { display_name: "Chain budget", chain_allowlist: ["base", "eth"] };

  it("below the chain's minimum: refused naming it, nothing taken, the key unused; at the minimum: accepted", async () => {
    stack = await start(100);
    const { agentToken, vaultId } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const below = await pay(stack, agentToken, "base", 99, "minimum-key-1");
    expect(below.json!.result.isError, below.text).to.equal(true);
    expect(below.json!.result._meta.error).to.deep.include({ code: -32602 });
    expect(below.json!.result._meta.error.message).to.equal("amount_cents must be at least 100 on chain base");
    expect(await stack.core.db("agent_payments").where({ vault_id: vaultId }).select("id")).to.deep.equal([]);
    const at = await pay(stack, agentToken, "base", 100, "minimum-key-1");
    expect(at.json!.result.structuredContent, at.text).to.deep.include({ kind: "accepted", status: "pending" });
    const balance = await stackRpc(stack)("/mcp/read", agentToken, "accounts.balance", {});
    expect(balance.json!.result.balance_cents).to.equal(10_000 - 100);
  });

  it("a chain on the sandbox rail takes a cent", async () => {
    stack = await start(100);
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const cent = await pay(stack, agentToken, "eth", 1, "minimum-key-2");
    expect(cent.json!.result.structuredContent, cent.text).to.deep.include({ kind: "accepted", status: "completed" });
  });

  it("a payment accepted before the operator raised the minimum: its retry answers its state", async () => {
    const { db } = await testDatabase();
    stack = await start(1, db);
    const { agentToken } = await fundedChildBudget(stack, { fundCents: 10_000n, budget });
    const first = await pay(stack, agentToken, "base", 50, "minimum-key-3");
    expect(first.json!.result.structuredContent, first.text).to.deep.include({ status: "pending" });
    await stack.close();
    stack = await start(100, db);
    const retry = await pay(stack, agentToken, "base", 50, "minimum-key-3");
    expect(retry.json!.result.structuredContent, retry.text).to.deep.include({
      payment_id: first.json!.result.structuredContent.payment_id,
      status: "pending",
    });
  });

  it("the setting: one dollar unless set; a value that is not a whole number of cents from 1 refuses the start, naming it", () => {
    const env = { CHAIN_BASE_RAIL: "evm", CHAIN_BASE_RPC_URL: "http://127.0.0.1:8545", CHAIN_BASE_USDC: USDC };
    expect(parseSettlementSettings(env).evm[0]!.minAmountCents).to.equal(100);
    expect(parseSettlementSettings({ ...env, CHAIN_BASE_MIN_AMOUNT_CENTS: "1" }).evm[0]!.minAmountCents).to.equal(1);
    for (const bad of ["0", "1.5", "-1", "ten"])
      expect(() => parseSettlementSettings({ ...env, CHAIN_BASE_MIN_AMOUNT_CENTS: bad }), bad).to.throw(
        "CHAIN_BASE_MIN_AMOUNT_CENTS must be a whole number from 1 to 9007199254740991",
      );
  });
});
