import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { freshWalletKeyFile } from "../support/anvil.js";
import { fundedChildBudget, stackRpc } from "../support/budgets.js";
import { chainSuite } from "../support/chain-suite.js";
import { requirePostgres } from "../support/db.js";
import { evmRailStackOptions, freshAddress } from "../support/evm-rail.js";
import type { McpStack } from "../support/mcp.js";

/**
 * Payments accepted for a hot wallet that no core holds any more: its key file replaced, or
 * its chain put back on the sandbox rail. Nothing was signed, so at their expiry they fail and
 * are refunded, rather than holding the vault's money as pending for ever.
 */
describe("unsigned payments of a hot wallet no core holds any more (anvil)", function () {
  this.timeout(120_000);
  const suite = chainSuite();
  const start = suite.start;

  /** `count` payments accepted on base by a core whose hot wallet is never funded, so none is signed; the core then stops. */
  async function acceptedThenKeyGone(count: number) {
    const first = await start(evmRailStackOptions(suite.chain.settings));
    const rpc = stackRpc(first);
    const { agentToken } = await fundedChildBudget(first, { fundCents: 100_000n, budget: { display_name: "Chain budget", chain_allowlist: ["base"] } });
    const ids = await Promise.all(
      Array.from({ length: count }, async () => {
        const r = await rpc("/mcp/write", agentToken, "payments.initiate", {
          counterparty: { address: freshAddress(), chain: "base", token: "USDC" },
          amount_cents: 400,
          currency: "USD",
          idempotency_key: `p-${randomBytes(6).toString("hex")}`,
        });
        expect(r.json!.result).to.deep.include({ kind: "accepted", status: "pending" });
        return r.json!.result.payment_id as string;
      }),
    );
    await first.core.settlement.worker.runOnce();
    await suite.stop(first);
    const statuses = async () =>
      (await suite.books.db("settlement_payments").whereIn("payment_id", ids).orderBy("payment_id").select("status", "failure_reason", "nonce")).map(
        (r: { status: string; failure_reason: string | null; nonce: string | null }) => `${r.status}:${r.failure_reason}:${r.nonce}`,
      );
    const failedAudits = async () =>
      Number((await suite.books.db("audit_records").whereIn("subject", ids).where({ action: "payments.settlement.failed" }).count({ n: "*" }))[0]!.n);
    return { ids, agentToken, statuses, failedAudits };
  }

  async function balanceOf(s: McpStack, token: string): Promise<number> {
    return (await stackRpc(s)("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents as number;
  }

  it("after the hot wallet's key file is replaced: they stay pending until their expiry, then fail as expired and are refunded", async () => {
    const { ids, agentToken, statuses, failedAudits } = await acceptedThenKeyGone(2);
    const next = await start(evmRailStackOptions({ ...suite.chain.settings, walletKeyFile: await freshWalletKeyFile() }));
    await next.core.settlement.worker.runOnce();
    expect(await statuses()).to.deep.equal(ids.map(() => "pending:null:null"));
    next.clock.advance(3_600_000);
    await next.core.settlement.worker.runOnce();
    expect(await statuses()).to.deep.equal(ids.map(() => "failed:expired:null"));
    expect(await balanceOf(next, agentToken)).to.equal(100_000);
    expect(await failedAudits()).to.equal(2);
    expect((await next.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });

  it("after the chain is put back on the sandbox rail: the same, and nothing is ever sent", async () => {
    const { ids, agentToken, statuses } = await acceptedThenKeyGone(1);
    const next = await start({});
    next.clock.advance(3_600_000);
    await next.core.settlement.worker.runOnce();
    expect(await statuses()).to.deep.equal(ids.map(() => "failed:expired:null"));
    expect(await balanceOf(next, agentToken)).to.equal(100_000);
    expect(await suite.chain.anvil.client.getTransactionCount({ address: suite.chain.account.address })).to.equal(0);
  });

  it("many of them and two cores with other keys racing past their expiry: each is refunded exactly once (PostgreSQL only)", async function () {
    requirePostgres(this, "two cores racing for one queue need a shared server");
    const { ids, agentToken, statuses, failedAudits } = await acceptedThenKeyGone(20);
    const cores = [await start(evmRailStackOptions({ ...suite.chain.settings, walletKeyFile: await freshWalletKeyFile() })), await start({})];
    for (const s of cores) s.clock.advance(3_600_000);
    await Promise.all(Array.from({ length: 6 }, (_, i) => cores[i % 2]!.core.settlement.worker.runOnce()));
    expect(await statuses()).to.deep.equal(ids.map(() => "failed:expired:null"));
    expect(await balanceOf(cores[0]!, agentToken)).to.equal(100_000);
    expect(await failedAudits()).to.equal(20);
    expect((await cores[0]!.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
