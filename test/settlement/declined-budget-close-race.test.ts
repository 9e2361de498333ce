import { expect } from "chai";
import type { Hex } from "viem";
import { BudgetStatus } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { Anvil } from "../support/anvil.js";
import { createOwner, grantFor, ownerSession, type TestOwner } from "../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../support/budget-life.js";
import { requirePostgres } from "../support/db.js";
import { mineWithTokenCode, startEvmRailStack } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, refundSweeps, REVERTS, settlementOf, strandedVaults, subBudget } from "../support/late-refunds.js";
import { expectRefused, reasonOf } from "../support/refusals.js";
import { startStack, type TestStack } from "../support/stack.js";

const FUNDED = 20_000;

/**
 * A declined draft sent its money up, so its close ignores keep_funds: closes of it (keeping funds or
 * not, by its parent's agent or its owner) racing refunds from below never strand, lose or double a cent.
 */
describe("closes of a declined budget racing refunds from below (anvil)", function () {
  this.timeout(300_000);
  let anvil: Anvil;
  let usdc: Hex;
  let stack: TestStack;

  before(async () => {
    // Small batches: several passes at once, each refunding a few payments concurrently.
    ({ anvil, usdc, stack } = await startEvmRailStack(startStack, 10_000_000, {
      provisioningLimitPerMinute: 1000,
      settlementWorker: { recheckMs: 0, underfundedRetryMs: 0, batchSize: 3 },
    }));
  });
  after(async () => {
    await anvil?.setAutomine(true);
    await stack?.close();
    await anvil?.stop();
  });

  // A millisecond on: a pass claims the longest due first, so passes in a row reach every payment.
  const settle = () => {
    stack.clock.advance(1);
    return stack.core.settlement.worker.runOnce();
  };
  const budgets = () => stack.clients.budgets;

  /**
   * The user's vault (FUNDED), a draft D funded 12,000 by the owner, S1..S3 (2,000 each) by D's agent, S1a (500) by S1's.
   * Each of those pays thrice: `reverted` (mined reverting, final), `later` (signed, out of the node's pool until
   * revertLater) and `unsigned`; then the owner declines D. The next pass refunds the first and last kind.
   */
  async function declinedTree() {
    const t = await budgetUnderRoot(stack, { parentCents: BigInt(FUNDED), stepUp: false, budget: { chainAllowlist: ["base"] } });
    expect(t.budget.status).to.equal(BudgetStatus.DRAFT);
    const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
    const d = t.child;
    await budgets().fundBudget({ sessionToken: session, vaultId: d.vaultId, amountCents: 12_000n, idempotencyKey: idempotencyKey() });
    const dToken = await grantFor(stack, d, { stepUp: true });
    const subs: TestOwner[] = [];
    for (let i = 0; i < 3; i++) subs.push(await subBudget(stack, t.owner, dToken, 2_000n));
    subs.push(await subBudget(stack, t.owner, await grantFor(stack, subs[0]!, { stepUp: true }), 500n));
    const payEach = (cents: number) => Promise.all(subs.map((s) => payFrom(stack, s, cents)));
    await anvil.setAutomine(false);
    const reverted = await payEach(110);
    await signAll(reverted);
    const later = await payEach(70);
    await signAll(later);
    for (const tx of await rawTransactions(later)) await anvil.rpc("anvil_dropTransaction", [tx.hash]);
    await mineWithTokenCode(anvil, usdc, REVERTS);
    await anvil.mine(4);
    const unsigned = await payEach(30);
    await budgets().declineBudget({ sessionToken: session, agentPrincipalId: d.agentPrincipalId });
    const vaults = [t.owner.vaultId, d.vaultId, ...subs.map((s) => s.vaultId)];
    return { ...t, session, d, dToken, subs, vaults, reverted, later, unsigned, payments: [...reverted, ...later, ...unsigned] };
  }

  /** Passes until every one of `payments` is signed (the clock stands still: nothing else moves meanwhile). */
  async function signAll(payments: string[]) {
    const unsigned = async () => (await Promise.all(payments.map((p) => settlementOf(stack, p)))).filter((s) => s === "pending:null");
    for (let i = 0; i < 20 && (await unsigned()).length > 0; i++) await settle();
    expect(await unsigned()).to.deep.equal([]);
  }

  const rawTransactions = (payments: string[]): Promise<{ hash: string; raw: string }[]> =>
    stack.core.db("settlement_transactions").whereIn("payment_id", payments).select("tx_hash as hash", "raw_tx as raw");

  /** The `later` transfers back in the node's pool, mined reverting and made final: the next pass refunds them. */
  async function revertLater(later: string[]) {
    for (const tx of await rawTransactions(later)) await anvil.rpc("eth_sendRawTransaction", [tx.raw]).catch(() => undefined);
    await mineWithTokenCode(anvil, usdc, REVERTS);
    await anvil.mine(4);
  }

  /** The refunds not made yet, `later`'s last, after whatever the test did before. */
  async function refundTheRest(later: string[]) {
    for (let i = 0; i < 3; i++) await settle();
    await revertLater(later);
    while ((await settle()) > 0);
  }

  /** In one snapshot: what the tree's vaults hold plus what its payments not failed hold in flight. */
  async function heldAndInFlight(vaults: string[], payments: string[]): Promise<number> {
    const { rows } = await stack.core.db.raw(
      `SELECT (SELECT coalesce(sum(balance_cents), 0) FROM vaults WHERE id = ANY(?::uuid[]))
            + (SELECT coalesce(sum(amount_cents), 0) FROM settlement_payments WHERE payment_id = ANY(?::uuid[]) AND status <> 'failed') AS cents`,
      [vaults, payments],
    );
    return Number(rows[0].cents);
  }

  /** Every payment failed, each refund climbed once from its budget through D to the user's vault, nothing left anywhere. */
  async function expectAllBack(t: Awaited<ReturnType<typeof declinedTree>>) {
    const failures = await Promise.all(t.payments.map((p) => settlementOf(stack, p)));
    const expected = [...t.reverted.map(() => "failed:reverted"), ...t.later.map(() => "failed:reverted"), ...t.unsigned.map(() => "failed:cancelled")];
    expect(failures).to.deep.equal(expected);
    expect(await Promise.all(t.vaults.map((v) => balanceOf(stack, v)))).to.deep.equal([FUNDED, ...t.vaults.slice(1).map(() => 0)]);
    expect(await heldAndInFlight(t.vaults, t.payments)).to.equal(FUNDED);
    const sweeps = await refundSweeps(stack, t.vaults.slice(1));
    const count = (v: string) => sweeps.filter((s) => s.subject === v).length;
    // Three payments from each budget: one sweep out of each level it climbs (S1a's climb S1 too).
    expect(t.vaults.slice(1).map(count)).to.deep.equal([12, 6, 3, 3, 3]);
    const stranded = await strandedVaults(stack);
    for (const v of t.vaults) expect(stranded).to.not.include(v);
  }

  it("many closes with and without keep_funds, sweeps and settlement passes at once: every refund reaches the user's vault once (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    for (let round = 0; round < 3; round++) {
      const t = await declinedTree();
      expect(await Promise.all(t.vaults.map((v) => balanceOf(stack, v)))).to.deep.equal([FUNDED - 4 * 210, 0, 0, 0, 0, 0]);
      const [parentToken, dToken] = [await grantFor(stack, t.owner, { stepUp: true }), await grantFor(stack, t.d, { stepUp: true })];
      const logged = stack.logs.lines.length;
      let racing = true;
      const samples: number[] = [];
      const sampling = (async () => {
        while (racing) samples.push(await heldAndInFlight(t.vaults, t.payments));
      })();
      const closeD = (keepFunds: boolean, by: "agent" | "owner") =>
        budgets().closeBudget({ ...(by === "agent" ? { accessToken: parentToken } : { sessionToken: t.session }), vaultId: t.d.vaultId, keepFunds });
      let closes: Awaited<ReturnType<typeof closeD>>[];
      let others: PromiseSettledResult<unknown>[];
      try {
        // The passes start after the closes, among them, or ahead of them; one round has a close without keep_funds.
        const passes = Array.from({ length: round * 3 }, () => settle());
        if (round === 2) await passes[0];
        const closing = [closeD(true, "agent"), closeD(true, "owner"), closeD(round !== 1, "agent"), closeD(true, "owner"), closeD(true, "agent")];
        // Closes keeping funds of the budgets below, by D's agent, and the owner's sweeps of them: all closed by the decline.
        const beside = Promise.allSettled([
          ...t.subs.slice(0, 3).map((s) => budgets().closeBudget({ accessToken: dToken, vaultId: s.vaultId, keepFunds: true })),
          ...t.subs.map((s) => budgets().sweepBudget({ sessionToken: t.session, vaultId: s.vaultId })),
        ]);
        passes.push(...Array.from({ length: 6 - round * 3 }, () => settle()));
        closes = await Promise.all(closing);
        others = await beside;
        await Promise.all(passes);
      } finally {
        racing = false;
        await sampling;
      }
      expect(closes.map((a) => a.status)).to.deep.equal(closes.map(() => BudgetStatus.CLOSED));
      expect(
        closes.filter((a) => !a.alreadyClosed),
        "one close ends it, the others find it closed",
      ).to.have.length(1);
      expect(closes.map((a) => a.sweptCents)).to.deep.equal(closes.map(() => 0n));
      // D's agent's grant goes with the close of D.
      const refused = others.map((r) => (r.status === "rejected" ? reasonOf(r.reason) : undefined));
      for (const r of refused.slice(0, 3)) expect([undefined, Reason.INVALID_TOKEN]).to.include(r);
      expect(refused.slice(3), "a sweep of a budget below is answered").to.deep.equal([undefined, undefined, undefined, undefined]);
      expect([...new Set(samples)], "nothing lost or made at any moment").to.deep.equal([FUNDED]);
      await refundTheRest(t.later);
      expect(
        stack.logs.lines.slice(logged).filter((l) => l.includes("settlement step failed")),
        "no step failed (a deadlock would)",
      ).to.deep.equal([]);
      await expectAllBack(t);
    }
    await anvil.setAutomine(true);
    await expectLedgerBalanced(stack);
  });

  it("agents of the declined budget and of those below it cannot close it keeping funds, nor stop a refund below: each reaches the user's vault once", async () => {
    const t = await declinedTree();
    const [dToken, s1Token] = [await grantFor(stack, t.d, { stepUp: true }), await grantFor(stack, t.subs[0]!, { stepUp: true })];
    const stranger = await grantFor(stack, await createOwner(stack), { stepUp: true });
    // No agent below D's parent vault closes or sweeps D; another user's agent does not find it; the decline revoked D's old grant.
    for (const accessToken of [dToken, s1Token]) {
      await expectRefused(budgets().closeBudget({ accessToken, vaultId: t.d.vaultId, keepFunds: true }), Reason.GRANT_REQUIRED);
      await expectRefused(budgets().sweepBudget({ accessToken, vaultId: t.d.vaultId }), Reason.GRANT_REQUIRED);
    }
    await expectRefused(budgets().closeBudget({ accessToken: stranger, vaultId: t.d.vaultId, keepFunds: true }), Reason.NOT_FOUND);
    await expectRefused(budgets().closeBudget({ accessToken: t.dToken, vaultId: t.subs[1]!.vaultId, keepFunds: true }), Reason.INVALID_TOKEN);
    // Closing their own budgets below again, keeping funds: closed by the decline already, nothing changes.
    for (const [accessToken, below] of [
      [dToken, t.subs[0]!],
      [s1Token, t.subs[3]!],
    ] as const) {
      const again = await budgets().closeBudget({ accessToken, vaultId: below.vaultId, keepFunds: true });
      expect([again.alreadyClosed, again.sweptCents]).to.deep.equal([true, 0n]);
    }
    expect((await stack.core.db("budgets").where({ vault_id: t.d.vaultId }).first("status")).status).to.equal("declined");

    // Refunds while D is declined, then D closed keeping funds by its parent's agent, then the rest.
    const due = async () => (await Promise.all([...t.reverted, ...t.unsigned].map((p) => settlementOf(stack, p)))).filter((s) => !s.startsWith("failed"));
    for (let i = 0; i < 20 && (await due()).length > 0; i++) await settle();
    expect(await Promise.all(t.vaults.map((v) => balanceOf(stack, v)))).to.deep.equal([FUNDED - 4 * 70, 0, 0, 0, 0, 0]);
    const closed = await budgets().closeBudget({ accessToken: t.parentToken, vaultId: t.d.vaultId, keepFunds: true });
    expect([closed.alreadyClosed, closed.sweptCents]).to.deep.equal([false, 0n]);
    await refundTheRest(t.later);
    await expectAllBack(t);
    await anvil.setAutomine(true);
    await expectLedgerBalanced(stack);
  });
});
