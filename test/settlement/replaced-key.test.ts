import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { expect } from "chai";
import { getAddress, type Hex } from "viem";
import { centsToUnits } from "../../core/settlement/rules.js";
import { ANVIL_CHAIN_ID, freshWalletKeyFile } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { chainSuite } from "../support/chain-suite.js";
import { requirePostgres } from "../support/db.js";
import { evmRailStackOptions, freshAddress, fundHotWallet } from "../support/evm-rail.js";
import type { McpStack } from "../support/mcp.js";
import { expectJsonRpcError } from "../support/refusals.js";

/**
 * Payments of a hot wallet whose key file was replaced since (CHAIN_<NAME>_RETIRED_WALLETS): a core holding only the new
 * key pays the unsigned ones from its wallet and reconciles the signed ones by their stored hashes and bytes.
 */
describe("payments of a hot wallet whose key was replaced, listed as retired (anvil)", function () {
  this.timeout(120_000);
  const suite = chainSuite();
  const close = suite.stop;

  const start = (keyFile: string, retiredWallets: string[] = []) =>
    suite.start(evmRailStackOptions({ ...suite.chain.settings, walletKeyFile: keyFile, retiredWallets }));

  /**
   * A core on a key of its own pays `count` payments of 400 cents; its wallet funded, it signs them (mined at once unless
   * the node holds them), else they stay pending, unsigned.
   */
  async function signedByOldKey(count: number, funded = true) {
    const oldKey = await freshWalletKeyFile();
    const old = await start(oldKey);
    const oldWallet = old.core.settlement.evm("base")!.wallet;
    if (funded) await fundHotWallet(suite.chain.anvil, suite.chain.usdc, oldWallet, centsToUnits(100_000));
    const rpc = stackRpc(old);
    const { agentToken, ownerToken, vaultId } = await fundedChildBudget(old, {
      fundCents: 100_000n,
      budget: { display_name: "Chain budget", chain_allowlist: ["base"] },
    });
    const payees: string[] = [];
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const to = freshAddress();
      const r = await rpc("/mcp/write", agentToken, "payments.initiate", {
        counterparty: { address: to, chain: "base", token: "USDC" },
        amount_cents: 400,
        currency: "USD",
        idempotency_key: `p-${randomBytes(6).toString("hex")}`,
      });
      expect(r.json!.result).to.deep.include({ kind: "accepted", status: "pending" });
      payees.push(to);
      ids.push(r.json!.result.payment_id as string);
    }
    await old.core.settlement.worker.runOnce();
    while (funded && (await rows(ids)).some((r) => r.status === "pending")) await old.core.settlement.worker.runOnce();
    return { old, oldKey, oldWallet, agentToken, ownerToken, vaultId, ids, payees };
  }

  async function rows(ids: string[]) {
    const found = await suite.books
      .db("settlement_payments")
      .whereIn("payment_id", ids)
      .select("payment_id", "status", "failure_reason", "tx_hash", "final", "wallet", "nonce");
    return ids.map((id) => found.find((r: { payment_id: string }) => r.payment_id === id)!) as {
      status: string;
      failure_reason: string | null;
      tx_hash: string;
      final: boolean;
      wallet: string;
      nonce: string | null;
    }[];
  }

  const balance = (of: string) => suite.chain.anvil.usdcBalance(suite.chain.usdc, of);
  const nonceOf = (s: McpStack) => suite.chain.anvil.client.getTransactionCount({ address: s.core.settlement.evm("base")!.wallet as Hex });
  const audits = async (ids: string[], action: string) =>
    Number((await suite.books.db("audit_records").whereIn("subject", ids).where({ action }).count({ n: "*" }))[0]!.n);

  /** Mines and runs the core's worker until every payment is final (bounded by passes, never by time). */
  async function settle(s: McpStack, ids: string[], passes = 12): Promise<void> {
    for (let i = 0; i < passes && (await rows(ids)).some((r) => !r.final); i++) {
      await suite.chain.anvil.mine(2);
      await s.core.settlement.worker.runOnce();
    }
  }

  it("mined before the key was replaced: stays submitted until its wallet is listed as retired, then completes by its stored hash, nothing signed", async () => {
    const { old, oldWallet, ids, payees } = await signedByOldKey(2);
    const signed = await rows(ids);
    expect(signed.map((r) => r.status)).to.deep.equal(["submitted", "submitted"]);
    await close(old);
    const newKey = await freshWalletKeyFile();
    const unlisted = await start(newKey);
    await settle(unlisted, ids, 3);
    expect(
      (await rows(ids)).map((r) => r.status),
      "not listed: not this core's",
    ).to.deep.equal(["submitted", "submitted"]);
    await close(unlisted);
    const next = await start(newKey, [oldWallet]);
    await settle(next, ids);
    const done = await rows(ids);
    expect(done.map((r) => `${r.status}:${r.final}`)).to.deep.equal(["completed:true", "completed:true"]);
    expect(done.map((r) => r.tx_hash)).to.deep.equal(signed.map((r) => r.tx_hash));
    for (const payee of payees) expect(await balance(payee)).to.equal(centsToUnits(400));
    expect(await nonceOf(next)).to.equal(0);
    expect(await audits(ids, "payments.settlement.completed")).to.equal(2);
    expect((await next.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("unsigned when the key was replaced: once its wallet is listed as retired, the current hot wallet pays them", async () => {
    const { old, oldWallet, ids, payees } = await signedByOldKey(2, false);
    expect((await rows(ids)).map((r) => `${r.status}:${r.nonce}`)).to.deep.equal(["pending:null", "pending:null"]);
    await close(old);
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    const wallet = next.core.settlement.evm("base")!.wallet;
    await fundHotWallet(suite.chain.anvil, suite.chain.usdc, wallet, centsToUnits(10_000));
    await settle(next, ids);
    expect((await rows(ids)).map((r) => `${r.status}:${r.final}:${r.wallet}`)).to.deep.equal(ids.map(() => `completed:true:${wallet}`));
    for (const payee of payees) expect(await balance(payee)).to.equal(centsToUnits(400));
    expect(await nonceOf(next)).to.equal(2);
    expect(await suite.chain.anvil.client.getTransactionCount({ address: oldWallet as Hex })).to.equal(0);
    expect((await next.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("unsigned, its budget closed since: the current hot wallet does not pay it; it fails as cancelled, refunded up", async () => {
    const { old, oldWallet, ids, payees, ownerToken, vaultId } = await signedByOldKey(1, false);
    const closed = await stackRpc(old)("/mcp/treasury", ownerToken, "agent.budget.revoke", { vault_id: vaultId });
    expect(closed.json!.result.swept_cents).to.equal(99_600);
    await close(old);
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    await fundHotWallet(suite.chain.anvil, suite.chain.usdc, next.core.settlement.evm("base")!.wallet, centsToUnits(10_000));
    await settle(next, ids, 3);
    expect((await rows(ids)).map((r) => `${r.status}:${r.failure_reason}:${r.nonce}`)).to.deep.equal(["failed:cancelled:null"]);
    expect(await balance(payees[0]!)).to.equal(0n);
    expect(await nonceOf(next)).to.equal(0);
    expect((await next.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("signed and lost from the node's pool before it was mined: the new core sends the stored bytes again, and it completes", async () => {
    await suite.chain.anvil.setAutomine(false);
    const { old, oldWallet, ids, payees } = await signedByOldKey(1);
    const [signed] = await rows(ids);
    await suite.chain.anvil.rpc("anvil_dropTransaction", [signed!.tx_hash]);
    await close(old);
    await suite.chain.anvil.setAutomine(true);
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    await settle(next, ids);
    expect((await rows(ids)).map((r) => `${r.status}:${r.tx_hash}`)).to.deep.equal([`completed:${signed!.tx_hash}`]);
    expect(await balance(payees[0]!)).to.equal(centsToUnits(400));
    expect(await nonceOf(next)).to.equal(0);
  });

  it("past its expiry unmined: the new core cannot cancel it and it stays submitted; the old key's core cancels it and it is refunded", async () => {
    await suite.chain.anvil.setAutomine(false);
    const { old, oldKey, oldWallet, ids, payees, agentToken } = await signedByOldKey(1);
    const [signed] = await rows(ids);
    await suite.chain.anvil.rpc("anvil_dropTransaction", [signed!.tx_hash]);
    await close(old);
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    next.clock.advance(3_600_000);
    await next.core.settlement.worker.runOnce();
    expect((await rows(ids)).map((r) => r.status)).to.deep.equal(["submitted"]);
    expect(await nonceOf(next)).to.equal(0);
    await close(next);
    // Only the old key can replace the transfer the new core sent again: the node drops it for the cancellation.
    await suite.chain.anvil.rpc("anvil_dropTransaction", [signed!.tx_hash]);
    await suite.chain.anvil.setAutomine(true);
    const keyHolder = await start(oldKey);
    keyHolder.clock.advance(3_600_000);
    await settle(keyHolder, ids);
    expect((await rows(ids)).map((r) => `${r.status}:${r.failure_reason}`)).to.deep.equal(["failed:expired"]);
    expect(await balance(payees[0]!)).to.equal(0n);
    expect((await stackRpc(keyHolder)("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents).to.equal(100_000);
    expect((await keyHolder.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("ledger verify --chains checks the retired wallet too: its payments match, a sweep to the current wallet is no payment, a send of its own is", async () => {
    const { old, oldKey, oldWallet, ids } = await signedByOldKey(2);
    await settle(old, ids);
    await close(old);
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    const wallet = next.core.settlement.evm("base")!.wallet;
    const key = (await readFile(oldKey, "utf8")).trim() as Hex;
    await suite.chain.anvil.fundGas(oldWallet);
    // The operator sweeps what the old wallet still holds to the current one.
    await suite.chain.anvil.transferUsdc(suite.chain.usdc, key, wallet, centsToUnits(50_000));
    const clean = await next.admin.audit.verifyChains({});
    expect(clean.differences.map((d) => d.message)).to.deep.equal([]);
    expect(clean.chains.map((c) => [c.wallet, c.outgoingUnits])).to.deep.equal([
      [wallet, "0"],
      [oldWallet, `${centsToUnits(800)}`],
    ]);
    // A send with the old key that no payment made is a difference of that wallet.
    const stranger = freshAddress().toLowerCase();
    await suite.chain.anvil.transferUsdc(suite.chain.usdc, key, stranger, centsToUnits(100));
    const found = await next.admin.audit.verifyChains({});
    expect(found.differences.map((d) => d.check)).to.deep.equal(["transfer_without_payment", "ledger_mismatch"]);
    expect(found.differences[0]!.message).to.include(`to ${stranger} matches no completed payment`);
  });

  it("refuses a payment to a retired hot wallet, in any case: the books would say paid out what the platform's own wallet received", async () => {
    const oldKey = await freshWalletKeyFile();
    const oldWallet = (await start(oldKey)).core.settlement.evm("base")!.wallet;
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    const { agentToken } = await fundedChildBudget(next, { fundCents: 10_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
    for (const address of [getAddress(oldWallet), oldWallet, `0x${oldWallet.slice(2).toUpperCase()}`]) {
      for (const method of ["payments.initiate", "payments.simulate"]) {
        const res = await stackRpc(next)("/mcp/write", agentToken, method, {
          counterparty: { address, chain: "base", token: "USDC" },
          amount_cents: 400,
          currency: "USD",
          idempotency_key: `p-${randomBytes(6).toString("hex")}`,
        });
        expect(expectJsonRpcError(res, -32602, "invalid_params").message, `${method} ${address}`).to.match(/retired hot wallet/);
      }
    }
    expect((await stackRpc(next)("/mcp/read", agentToken, "accounts.balance", {})).json!.result.balance_cents).to.equal(10_000);
  });

  it("a retired wallet that is the current one, was never this chain's, or paid on another network refuses the start, naming the setting", async () => {
    const { old, oldKey, oldWallet } = await signedByOldKey(0);
    await close(old);
    const refusal = (keyFile: string, retired: string[]) =>
      start(keyFile, retired).then(
        () => "started",
        (err: Error) => err.message,
      );
    expect(await refusal(oldKey, [oldWallet])).to.equal(`CHAIN_BASE_RETIRED_WALLETS lists ${oldWallet}, the hot wallet this core pays from`);
    const stranger = freshAddress().toLowerCase();
    expect(await refusal(await freshWalletKeyFile(), [stranger])).to.equal(
      `CHAIN_BASE_RETIRED_WALLETS lists ${stranger}, which was never chain base's hot wallet in this database`,
    );
    await suite.books.db("settlement_nonces").where({ chain: "base", wallet: oldWallet }).update({ chain_id: 999_999 });
    expect(await refusal(await freshWalletKeyFile(), [oldWallet])).to.equal(
      `CHAIN_BASE_RETIRED_WALLETS lists ${oldWallet}, which paid on chain id 999999; this node is chain id ${ANVIL_CHAIN_ID}`,
    );
  });

  it("many of them, the old and the new key's cores racing over them: each completes once, paid once (PostgreSQL only)", async function () {
    requirePostgres(this, "two cores racing for one queue need a shared server");
    const { old, oldWallet, ids, payees } = await signedByOldKey(12);
    const next = await start(await freshWalletKeyFile(), [oldWallet]);
    for (let i = 0; i < 8 && (await rows(ids)).some((r) => !r.final); i++) {
      await suite.chain.anvil.mine(2);
      await Promise.all([old, next, old, next].map((s) => s.core.settlement.worker.runOnce()));
    }
    expect((await rows(ids)).map((r) => `${r.status}:${r.final}`)).to.deep.equal(ids.map(() => "completed:true"));
    for (const payee of payees) expect(await balance(payee)).to.equal(centsToUnits(400));
    expect(await audits(ids, "payments.settlement.completed")).to.equal(12);
    expect(await nonceOf(next)).to.equal(0);
    expect((await next.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("many unsigned ones and two replicas of the new key racing to pay them: one nonce each, each payee paid once (PostgreSQL only)", async function () {
    requirePostgres(this, "two cores racing for one queue need a shared server");
    const { old, oldWallet, ids, payees } = await signedByOldKey(10, false);
    await close(old);
    const newKey = await freshWalletKeyFile();
    const replicas = [await start(newKey, [oldWallet]), await start(newKey, [oldWallet])];
    const wallet = replicas[0]!.core.settlement.evm("base")!.wallet;
    await fundHotWallet(suite.chain.anvil, suite.chain.usdc, wallet, centsToUnits(10_000));
    for (let i = 0; i < 10 && (await rows(ids)).some((r) => !r.final); i++) {
      await Promise.all([...replicas, ...replicas].map((s) => s.core.settlement.worker.runOnce()));
      await suite.chain.anvil.mine(2);
    }
    const done = await rows(ids);
    expect(done.map((r) => `${r.status}:${r.final}:${r.wallet}`)).to.deep.equal(ids.map(() => `completed:true:${wallet}`));
    expect(done.map((r) => Number(r.nonce)).sort((a, b) => a - b)).to.deep.equal(ids.map((_, i) => i));
    for (const payee of payees) expect(await balance(payee)).to.equal(centsToUnits(400));
    expect(await audits(ids, "payments.settlement.completed")).to.equal(10);
    expect((await replicas[0]!.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
