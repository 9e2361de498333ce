import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { privateKeyToAccount } from "viem/accounts";
import { createJar, createUser, signIn } from "../support/agent-oauth.js";
import type { Anvil } from "../support/anvil.js";
import { fundedChildBudget } from "../support/budgets.js";
import { startEvmRailStack } from "../support/evm-rail.js";
import { postRpc } from "../support/mcp.js";
import { startStack, type TestStack } from "../support/stack.js";

describe("web pages: payment rows show settlement status and transaction hash", function () {
  this.timeout(120_000);
  let anvil: Anvil;
  let stack: TestStack;

  before(async () => {
    ({ anvil, stack } = await startEvmRailStack(startStack, 1_000_000, {
      gateway: true,
      publicUrls: true,
      scrypt: { N: 1024, r: 8, p: 1 },
      // As this suite always ran: the under-funded retry at its default (the wallet covers every payment here).
      settlementWorker: { recheckMs: 0 },
    }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  it("the money view shows a sent payment as confirming with its hash, then as paid", async () => {
    const rpc = (path: string, token: string, method: string, params: unknown) =>
      postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
    const user = await createUser(stack);
    const { vaultId, agentToken: agent } = await fundedChildBudget(stack, {
      owner: user,
      fundCents: 10_000n,
      budget: { display_name: "Chain", chain_allowlist: ["base"] },
    });
    const to = privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;
    await rpc("/mcp/write", agent, "payments.initiate", {
      counterparty: { address: to, chain: "base", token: "USDC" },
      amount_cents: 700,
      currency: "USD",
      idempotency_key: `p-${randomBytes(6).toString("hex")}`,
    });
    await stack.core.settlement.worker.runOnce();
    const hash = (await stack.core.db("settlement_payments").where({ vault_id: vaultId }).first()).tx_hash as string;
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email, "/dashboard/money");
    const sent = await (await jar.get("/dashboard/money")).text();
    expect(sent).to.include("Sent, confirming");
    expect(sent).to.include(`<code class="tx-hash" title="${hash}">${hash.slice(0, 6)}…${hash.slice(-4)}</code>`);
    await anvil.mine(2);
    await stack.core.settlement.worker.runOnce();
    const paid = await (await jar.get("/dashboard/money")).text();
    expect(paid).to.not.include("Sent, confirming");
    expect(paid).to.include(`title="${hash}"`);
  });
});
