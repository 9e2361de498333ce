import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { getAddress, type Hex } from "viem";
import type { Anvil } from "../support/anvil.js";
import { createOwner, fundedChildBudget } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";
import { freshAddress, mineWithTokenCode, startEvmRailStack } from "../support/evm-rail.js";
import { expectJsonRpcError } from "../support/refusals.js";
import { up as lowerCaseEvmRecipients } from "../../core/db/migrations/0050-evm-recipients-lower-case.js";

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
    await mineWithTokenCode(anvil, usdc, ANSWERS_FALSE);
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

  it("pays an address given in all upper case (no checksum) once, to that address, like its checksummed form", async () => {
    const a = await agent();
    const to = freshAddress();
    const accepted = await a.pay(`0x${to.slice(2).toUpperCase()}`, 700);
    const id = accepted.json!.result.payment_id as string;
    await settle();
    await anvil.mine(2);
    await settle();
    const got = await rpc("/mcp/read", a.token, "payments.get", { payment_id: id });
    expect(got.json!.result).to.deep.include({ status: "completed", failure_reason: null });
    expect(await anvil.usdcBalance(usdc, to)).to.equal(7_000_000n);
    expect(await a.balance()).to.equal(100_000 - 700);
    const chains = await stack.admin.audit.verifyChains({});
    expect(chains.differences.map((d) => d.message)).to.deep.equal([]);
  });

  it("a payee an older release stored in upper case is lower-cased on upgrade, then paid", async () => {
    const a = await agent();
    const to = freshAddress();
    const id = (await a.pay(to, 300)).json!.result.payment_id as string;
    const row = () => stack.core.db("settlement_payments").where({ payment_id: id });
    await row().update({ recipient: `0x${to.slice(2).toUpperCase()}` });
    await lowerCaseEvmRecipients(stack.core.db);
    expect((await row().first("recipient")).recipient).to.equal(to.toLowerCase());
    await settle();
    await anvil.mine(2);
    await settle();
    expect((await rpc("/mcp/read", a.token, "payments.get", { payment_id: id })).json!.result.status).to.equal("completed");
    expect(await anvil.usdcBalance(usdc, to)).to.equal(3_000_000n);
  });

  it("refuses a payment to the hot wallet itself, in any case: it would move nothing on chain while the books say it was paid", async () => {
    const a = await agent();
    const wallet = stack.core.settlement.evm("base")!.wallet;
    for (const address of [getAddress(wallet), wallet, `0x${wallet.slice(2).toUpperCase()}`]) {
      const refused = expectJsonRpcError(await a.pay(address, 100), -32602, "invalid_params");
      expect(refused.message, address).to.match(/hot wallet/);
    }
    expect(await a.balance()).to.equal(100_000);
    const chains = await stack.admin.audit.verifyChains({});
    expect(chains.differences.map((d) => d.message)).to.deep.equal([]);
  });

  it("refuses a payment to the USDC contract itself, in any case: the token could never send it back", async () => {
    const a = await agent();
    for (const address of [getAddress(usdc), usdc.toLowerCase(), `0x${usdc.slice(2).toUpperCase()}`]) {
      const refused = expectJsonRpcError(await a.pay(address, 100), -32602, "invalid_params");
      expect(refused.message, address).to.match(/USDC contract/);
    }
    expect(await a.balance()).to.equal(100_000);
    expect(await anvil.usdcBalance(usdc, usdc)).to.equal(0n);
  });

  it("many concurrent payments, half of them to the hot wallet or the USDC contract: only the others are accepted and paid (in any case), the books match the chain (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent payments need several connections");
    const a = await agent();
    const wallet = getAddress(stack.core.settlement.evm("base")!.wallet);
    const upper = (address: string) => `0x${address.slice(2).toUpperCase()}`;
    const payees = Array.from({ length: 30 }, (_, i) => (i % 2 === 1 ? (i % 3 === 0 ? usdc : wallet) : i % 4 === 0 ? upper(freshAddress()) : freshAddress()));
    const results = await Promise.all(payees.map((to) => a.pay(to, 100)));
    expect(results.filter((r) => r.json!.result?.kind === "accepted").length).to.equal(15);
    expect(results.filter((r) => r.json!.error?.code === -32602).length).to.equal(15);
    await settle();
    await anvil.mine(2);
    await settle();
    expect(await a.balance()).to.equal(100_000 - 15 * 100);
    const paid = await Promise.all(payees.filter((_, i) => i % 2 === 0).map((to) => anvil.usdcBalance(usdc, to.toLowerCase())));
    expect(paid).to.deep.equal(paid.map(() => 1_000_000n));
    const chains = await stack.admin.audit.verifyChains({});
    expect(chains.differences.map((d) => d.message)).to.deep.equal([]);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
