import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { expect } from "chai";
import type { Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import { ANVIL_CHAIN_ID, freshWalletKeyFile, startAnvil, type Anvil } from "../support/anvil.js";
import { ALL_AGENT_SCOPES, createOwner } from "../support/budgets.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * The books against the chain (AuditService.VerifyChains, `ledger verify --chains`): every
 * outgoing USDC transfer of the hot wallet is one completed payment, and the balances add up.
 */
describe("books that match the chain (anvil)", function () {
  this.timeout(180_000);
  let anvil: Anvil;
  let stack: McpStack;
  let usdc: Hex;
  let keyFile: string;
  let wallet: string;

  before(async () => {
    anvil = await startAnvil();
    usdc = await anvil.deployUsdc();
    keyFile = await freshWalletKeyFile();
    stack = await startMcpStack({
      settlement: {
        evm: [
          {
            chain: "base",
            rail: "evm",
            rpcUrl: anvil.url,
            usdc,
            chainId: ANVIL_CHAIN_ID,
            confirmations: 2,
            finalityBlocks: 4,
            expirySeconds: 3600,
            rpcTimeoutMs: 2000,
            walletKeyFile: keyFile,
          },
        ],
      },
      settlementPollMs: 0,
      settlementWorker: { recheckMs: 0, underfundedRetryMs: 0 },
    });
    wallet = stack.core.settlement.evm("base")!.wallet;
    await anvil.fundGas(wallet);
    await anvil.mintUsdc(usdc, wallet, centsToUnits(10_000_000));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const recipient = () => privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;

  /** Pays `amounts` from a fresh funded budget on base and settles them to completed. */
  async function payAndSettle(amounts: number[]): Promise<string[]> {
    const owner = await createOwner(stack);
    const ownerToken = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!
      .accessToken;
    const budget = await rpc("/mcp/treasury", ownerToken, "agent.budget.create", {
      purpose: "trip",
      display_name: "Chain budget",
      chain_allowlist: ["base"],
      idempotency_key: `b-${randomBytes(6).toString("hex")}`,
    });
    const vaultId = budget.json!.result.vault_id as string;
    await stack.admin.budgets.fundVault({ vaultId, amountCents: 1_000_000n });
    const token = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId, scopes: ALL_AGENT_SCOPES })).token!.accessToken;
    const ids = await Promise.all(
      amounts.map(async (amount) => {
        const r = await rpc("/mcp/write", token, "payments.initiate", {
          counterparty: { address: recipient(), chain: "base", token: "USDC" },
          amount_cents: amount,
          currency: "USD",
          idempotency_key: `p-${randomBytes(6).toString("hex")}`,
        });
        expect(r.json!.result, JSON.stringify(r.json)).to.have.property("payment_id");
        return r.json!.result.payment_id as string;
      }),
    );
    await stack.core.settlement.worker.runOnce();
    await anvil.mine(2);
    await stack.core.settlement.worker.runOnce();
    for (const id of ids) {
      const row = await stack.core.db("settlement_payments").where({ payment_id: id }).first();
      expect(row.status, id).to.equal("completed");
    }
    return ids;
  }

  it("passes clean books, also asked many times at once", async () => {
    await payAndSettle([1_500, 250, 99]);
    const results = await Promise.all(Array.from({ length: 8 }, () => stack.admin.audit.verifyChains({})));
    for (const r of results) {
      expect(r.differences.map((d) => d.message)).to.deep.equal([]);
      expect(r.ok).to.equal(true);
      expect(r.chains).to.have.length(1);
      expect(r.chains[0]).to.deep.include({ chain: "base", wallet, outgoingUnits: `${centsToUnits(1_849)}`, ledgerOutflowUnits: `${centsToUnits(1_849)}` });
    }
  });

  it("names a payment whose booked amount was altered, with both amounts", async () => {
    const [id] = await payAndSettle([700]);
    const row = await stack.core.db("settlement_payments").where({ payment_id: id }).first();
    await stack.core.db("settlement_payments").where({ payment_id: id }).update({ amount_cents: 701 });
    try {
      const r = await stack.admin.audit.verifyChains({});
      expect(r.ok).to.equal(false);
      expect(r.differences).to.have.length(1);
      expect(r.differences[0]).to.deep.include({
        chain: "base",
        check: "amount_mismatch",
        paymentId: id,
        txHash: row.tx_hash.toLowerCase(),
        chainUnits: `${centsToUnits(700)}`,
        booksUnits: `${centsToUnits(701)}`,
      });
    } finally {
      await stack.core.db("settlement_payments").where({ payment_id: id }).update({ amount_cents: 700 });
    }
    expect((await stack.admin.audit.verifyChains({})).ok).to.equal(true);
  });

  it("names a transfer sent from the hot wallet outside Vaultgate", async () => {
    const account = privateKeyToAccount((await readFile(keyFile, "utf8")).trim() as Hex);
    const rail = createEvmRail(stack.core.settlement.evm("base")!.settings, account);
    const to = recipient();
    const signed = await rail.signTransfer(await rail.minedNonce(), to, 4_200_000n, await rail.fees());
    await rail.broadcast(signed.rawTx);
    await anvil.mine(1);
    const r = await stack.admin.audit.verifyChains({});
    expect(r.ok).to.equal(false);
    const checks = r.differences.map((d) => d.check);
    expect(checks).to.include.members(["transfer_without_payment", "ledger_mismatch"]);
    const stray = r.differences.find((d) => d.check === "transfer_without_payment")!;
    expect(stray).to.deep.include({ chain: "base", txHash: signed.txHash.toLowerCase(), paymentId: "", chainUnits: "4200000", booksUnits: "0" });
    expect(stray.message).to.include(signed.txHash.toLowerCase());
  });
});
