import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { privateKeyToAccount } from "viem/accounts";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { Anvil } from "../support/anvil.js";
import { createOwner, fundedChildBudget } from "../support/budgets.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";
import { requirePostgres } from "../support/db.js";
import { mineWithTokenCode, startEvmRailStack } from "../support/evm-rail.js";

/** Code that reverts any call: the token refuses the transfer. */
const REVERTS = "0x60006000fd";

/** Agent payments on base settling on a local anvil, through the JSON-RPC tools. */
describe("payments that settle on a chain (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let stack: McpStack;
  let usdc: `0x${string}`;

  before(async () => {
    ({ anvil, usdc, stack } = await startEvmRailStack(startMcpStack, 10_000_000));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const recipient = () => privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;
  const settle = () => stack.core.settlement.worker.runOnce();

  /** A funded child budget on base and eth and an agent token on it. */
  async function agent(limits: Record<string, unknown> = {}) {
    const owner = await createOwner(stack);
    const { vaultId, agentToken: token } = await fundedChildBudget(stack, {
      owner,
      fundCents: 100_000n,
      budget: { display_name: "Chain budget", chain_allowlist: ["base", "sol"], ...limits },
    });
    const balance = async () => (await rpc("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents as number;
    return { token, vaultId, balance, owner };
  }

  const args = (to: string, amount: number, over: Record<string, unknown> = {}) => ({
    counterparty: { address: to, chain: "base", token: "USDC", ...over },
    amount_cents: amount,
    currency: "USD",
    idempotency_key: `p-${randomBytes(6).toString("hex")}`,
  });

  it("accepts as pending with the amount reserved, goes out, and completes; a retry and payments.get show the current state", async () => {
    const a = await agent();
    const to = recipient();
    const call = args(to, 1_500);
    const accepted = await rpc("/mcp/write", a.token, "payments.initiate", call);
    expect(accepted.json!.result).to.deep.include({ kind: "accepted", status: "pending" });
    const id = accepted.json!.result.payment_id as string;
    expect(await a.balance()).to.equal(98_500);

    await settle();
    const retry = await rpc("/mcp/write", a.token, "payments.initiate", call);
    expect(retry.json!.result).to.deep.include({ kind: "accepted", payment_id: id, status: "submitted" });
    const txHash = retry.json!.result.tx_hash as string;
    expect(txHash).to.match(/^0x[0-9a-f]{64}$/);

    await anvil.mine(1);
    await settle();
    const got = await rpc("/mcp/read", a.token, "payments.get", { payment_id: id });
    expect(got.json!.result).to.deep.include({
      payment_id: id,
      status: "completed",
      chain: "base",
      token: "USDC",
      amount_cents: 1_500,
      currency: "USD",
      counterparty: to,
      tx_hash: txHash,
      failure_reason: null,
    });
    expect(got.json!.result.confirmations).to.be.at.least(2);
    expect(await anvil.usdcBalance(usdc, to)).to.equal(15_000_000n);
    expect(await a.balance()).to.equal(98_500);

    const rows: { action: string; actor: string }[] = await stack.core.db("audit_records").where({ subject: id }).orderBy("seq").select("action", "actor");
    expect(rows.map((r) => r.action)).to.include.members([
      "payments.initiate",
      "payments.settlement.submitted",
      "payments.settlement.completed",
      "payments.get",
    ]);
    const payer = rows.find((r) => r.action === "payments.initiate")!.actor;
    expect(payer).to.match(/^agent:/);
    expect(
      rows.filter((r) => r.action.startsWith("payments.settlement.")).map((r) => r.actor),
      "in the paying agent's feed",
    ).to.deep.equal([payer, payer]);
    const verify = await stack.admin.audit.verifyLedger({});
    expect(verify.discrepancies).to.deep.equal([]);
  });

  it("a failed transfer is refunded to the vault in one movement and stops counting toward the caps", async () => {
    const a = await agent({ amount_cap_cents_lifetime: 2_000 });
    const accepted = await rpc("/mcp/write", a.token, "payments.initiate", args(recipient(), 1_500));
    const id = accepted.json!.result.payment_id as string;
    expect(await a.balance()).to.equal(98_500);
    const over = await rpc("/mcp/write", a.token, "payments.initiate", args(recipient(), 1_000));
    expect(over.json!.error.data.reason_id).to.equal("policy_denied");
    await anvil.setAutomine(false);
    await settle();
    await mineWithTokenCode(anvil, usdc, REVERTS);
    await anvil.setAutomine(true);
    await anvil.mine(3); // a failure refunds for good, so it waits for finality (4 blocks here)
    await settle();
    const got = await rpc("/mcp/read", a.token, "payments.get", { payment_id: id });
    expect(got.json!.result).to.deep.include({ status: "failed", failure_reason: "reverted" });
    expect(await a.balance()).to.equal(100_000);
    const now = await rpc("/mcp/write", a.token, "payments.initiate", args(recipient(), 1_000));
    expect(now.json!.result).to.deep.include({ kind: "accepted", status: "pending" });
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("on the evm rail only USDC to an EVM address in USD; sol stays on the sandbox rail, completed at once", async () => {
    const a = await agent();
    const usdt = await rpc("/mcp/write", a.token, "payments.initiate", args(recipient(), 100, { token: "USDT" }));
    expect([usdt.json!.error.code, usdt.json!.error.data.reason_id]).to.deep.equal([-32602, "token_unsupported"]);
    const to = recipient();
    const badSum = to.slice(0, 2) + [...to.slice(2)].map((c) => (/[a-f]/.test(c) ? c.toUpperCase() : /[A-F]/.test(c) ? c.toLowerCase() : c)).join("");
    const checksum = await rpc("/mcp/write", a.token, "payments.initiate", args(badSum, 100));
    expect([checksum.json!.error.code, checksum.json!.error.data.reason_id]).to.deep.equal([-32602, "invalid_params"]);
    const short = await rpc("/mcp/write", a.token, "payments.initiate", args("0x1234", 100));
    expect(short.json!.error.code).to.equal(-32602);
    expect(await a.balance()).to.equal(100_000);
    const sol = await rpc("/mcp/write", a.token, "payments.initiate", args("SoLaNaAddr", 100, { chain: "sol", token: "SOL" }));
    expect(sol.json!.result).to.deep.include({ kind: "accepted", status: "completed" });
    expect(sol.json!.result.tx_hash).to.equal(undefined);
  });

  it("a hostile agent cannot read another vault's payment: it reads like one that does not exist", async () => {
    const a = await agent();
    const b = await agent();
    const accepted = await rpc("/mcp/write", a.token, "payments.initiate", args(recipient(), 100));
    const id = accepted.json!.result.payment_id as string;
    const theirs = await rpc("/mcp/read", b.token, "payments.get", { payment_id: id });
    const none = await rpc("/mcp/read", b.token, "payments.get", { payment_id: "00000000-0000-4000-8000-000000000000" });
    expect(theirs.json!.error.data.reason_id).to.equal("not_found");
    const shape = (e: { code: number; message: string; data: { reason_id: string } }) => [e.code, e.message, e.data.reason_id];
    expect(shape(theirs.json!.error)).to.deep.equal(shape(none.json!.error));
  });

  it("many concurrent payments from one vault: caps hold over reserved plus completed spend, each payee paid once, the books match (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent payments need several connections");
    const a = await agent({ amount_cap_cents_lifetime: 10_000 });
    const payees = Array.from({ length: 30 }, () => recipient());
    const results = await Promise.all(payees.map((to) => rpc("/mcp/write", a.token, "payments.initiate", args(to, 500))));
    const accepted = results.filter((r) => r.json!.result?.kind === "accepted");
    expect(accepted.length).to.equal(20);
    for (let i = 0; i < 30; i++) {
      await settle();
      await anvil.mine(1);
    }
    await settle();
    const statuses = await Promise.all(
      accepted.map(async (r) => (await rpc("/mcp/read", a.token, "payments.get", { payment_id: r.json!.result.payment_id })).json!.result.status),
    );
    expect(statuses).to.deep.equal(accepted.map(() => "completed"));
    const paid = await Promise.all(payees.map((to) => anvil.usdcBalance(usdc, to)));
    expect(paid.filter((u) => u === centsToUnits(500)).length).to.equal(20);
    expect(paid.filter((u) => u === 0n).length).to.equal(10);
    expect(await a.balance()).to.equal(90_000);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
