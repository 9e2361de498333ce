import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startAnvil, type Anvil, freshWalletKeyFile } from "../support/anvil.js";
import { deployBlockingToken, type BlockingToken } from "../support/blocking-token.js";
import { createOwner, fundedChildBudget } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { evmChainSettings, evmRailStackOptions, freshAddress } from "../support/evm-rail.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * A hostile agent paying addresses the token refuses (as USDC refuses blacklisted ones): sent,
 * each transfer would revert at the hot wallet's gas and be refunded, so the agent could burn
 * the platform's gas for ever at no cost. The worker asks the token first and sends nothing.
 */
describe("payees the token refuses (anvil)", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let token: BlockingToken;
  let stack: McpStack;
  let wallet: string;

  before(async () => {
    anvil = await startAnvil();
    token = await deployBlockingToken(anvil);
    const settings = evmChainSettings(anvil.url, token.address, { walletKeyFile: await freshWalletKeyFile() });
    stack = await startMcpStack(evmRailStackOptions(settings));
    wallet = stack.core.settlement.evm("base")!.wallet;
    await anvil.fundGas(wallet);
    await token.mint(wallet, 10n ** 12n);
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const rpc = (path: string, bearer: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${bearer}` });
  const settle = () => stack.core.settlement.worker.runOnce();
  const sentByWallet = () => anvil.client.getTransactionCount({ address: wallet as `0x${string}` });

  async function agent() {
    const { agentToken } = await fundedChildBudget(stack, {
      owner: await createOwner(stack),
      fundCents: 100_000n,
      budget: { display_name: "Chain budget", chain_allowlist: ["base"] },
    });
    const pay = async (to: string, amount: number) => {
      const r = await rpc("/mcp/write", agentToken, "payments.initiate", {
        counterparty: { address: to, chain: "base", token: "USDC" },
        amount_cents: amount,
        currency: "USD",
        idempotency_key: `p-${randomBytes(6).toString("hex")}`,
      });
      expect(r.json!.result, JSON.stringify(r.json)).to.deep.include({ kind: "accepted", status: "pending" });
      return r.json!.result.payment_id as string;
    };
    const get = async (id: string) => (await rpc("/mcp/read", agentToken, "payments.get", { payment_id: id })).json!.result;
    const balance = async () => (await rpc("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents as number;
    return { pay, get, balance };
  }

  it("fails a payment to a refused payee as reverted and refunds it, with nothing signed or sent; a good payee in the same pass is paid", async () => {
    const a = await agent();
    const blocked = freshAddress();
    await token.blockPayee(blocked);
    const good = freshAddress();
    const sent = await sentByWallet();
    const [refusedId, goodId] = [await a.pay(blocked, 300), await a.pay(good, 200)];
    await settle();
    await anvil.mine(2);
    await settle();
    expect(await a.get(refusedId)).to.deep.include({ status: "failed", failure_reason: "reverted", tx_hash: null });
    expect(await a.get(goodId)).to.deep.include({ status: "completed" });
    expect(await sentByWallet(), "only the good payee's transfer was sent").to.equal(sent + 1);
    expect(await a.balance()).to.equal(100_000 - 200);
    expect((await stack.admin.audit.verifyChains({})).differences.map((d) => d.message)).to.deep.equal([]);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("many concurrent payments, half to refused payees: the others are paid once, the refused ones refunded once and never sent (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent payments need several connections");
    const a = await agent();
    const blocked = Array.from({ length: 3 }, () => freshAddress());
    for (const b of blocked) await token.blockPayee(b);
    const payees = Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? freshAddress() : blocked[i % 3]!));
    const sent = await sentByWallet();
    const ids = await Promise.all(payees.map((to) => a.pay(to, 100)));
    await Promise.all([settle(), settle()]);
    await anvil.mine(2);
    await settle();
    const got = await Promise.all(ids.map((id) => a.get(id)));
    expect(got.map((g) => `${g.status}:${g.failure_reason}`)).to.deep.equal(payees.map((_, i) => (i % 2 === 0 ? "completed:null" : "failed:reverted")));
    expect(await sentByWallet()).to.equal(sent + 15);
    expect(await a.balance()).to.equal(100_000 - 15 * 100);
    const failedAudits = await stack.core.db("audit_records").whereIn("subject", ids).where({ action: "payments.settlement.failed" }).count({ n: "*" });
    expect(Number(failedAudits[0]!.n)).to.equal(15);
    expect((await stack.admin.audit.verifyChains({})).differences.map((d) => d.message)).to.deep.equal([]);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
