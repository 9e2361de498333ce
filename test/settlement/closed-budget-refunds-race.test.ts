import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { Anvil } from "../support/anvil.js";
import { grantFor, ownerSession, type TestOwner } from "../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../support/budget-life.js";
import { requirePostgres } from "../support/db.js";
import { startEvmRailStack } from "../support/evm-rail.js";
import { idempotencyKey, payFrom, settlementOf, strandedVaults, subBudget } from "../support/late-refunds.js";
import { reasonOf } from "../support/refusals.js";
import { startStack, type TestStack } from "../support/stack.js";

/** Refunds climbing closed budgets while closes, sweeps and fundings lock the same vaults. */
describe("refunds into closed budgets, racing closes, sweeps and funding (anvil)", function () {
  this.timeout(300_000);
  let anvil: Anvil;
  let stack: TestStack;

  before(async function () {
    requirePostgres(this, "racing transactions need several connections");
    // Small batches: several passes at once, each refunding a few payments concurrently.
    ({ anvil, stack } = await startEvmRailStack(startStack, 10_000_000, {
      provisioningLimitPerMinute: 1000,
      settlementWorker: { recheckMs: 0, underfundedRetryMs: 0, batchSize: 3 },
    }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  const settle = () => stack.core.settlement.worker.runOnce();
  const budgets = () => stack.clients.budgets;
  const fund = (accessToken: string, vaultId: string, amountCents: bigint) =>
    budgets().fundBudget({ accessToken, vaultId, amountCents, idempotencyKey: idempotencyKey() });

  /**
   * The user's vault (100,000) -> B (60,000) -> S1..S5 (5,000 each), with payments from B and every S,
   * all past their expiry; S1..S3 closed (their money swept up to B), S4 closed keeping its money.
   */
  async function expiredTree() {
    const t = await budgetUnderRoot(stack, { parentCents: 100_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
    await fund(t.parentToken, t.child.vaultId, 60_000n);
    const subs: TestOwner[] = [];
    for (let i = 0; i < 5; i++) subs.push(await subBudget(stack, t.owner, await grantFor(stack, t.child, { stepUp: true }), 5_000n));
    const payments: string[] = [];
    for (const s of [t.child, ...subs]) for (const cents of [300, 200, 100, 50]) payments.push(await payFrom(stack, s, cents));
    const bToken = await grantFor(stack, t.child, { stepUp: true });
    for (const [i, s] of subs.slice(0, 4).entries()) await budgets().closeBudget({ accessToken: bToken, vaultId: s.vaultId, keepFunds: i === 3 });
    stack.clock.advance(3_601_000);
    // Fresh grants: the ones above are past their lifetime now.
    return { ...t, subs, payments, rToken: await grantFor(stack, t.owner, { stepUp: true }), bToken: await grantFor(stack, t.child, { stepUp: true }) };
  }

  it("no deadlock, every refund reaches the user's vault once, and the books balance (PostgreSQL only)", async () => {
    for (let round = 0; round < 4; round++) {
      const t = await expiredTree();
      const [closed, open] = [t.subs.slice(0, 4), t.subs[4]!];
      const session = await ownerSession(stack, t.owner.userId, { stepUp: true });
      const logged = stack.logs.lines.length;
      // The owner sweeps the closed budgets over and over while their refunds run: each sweep locks B
      // and one of them, as each refund locks that one and climbs to B.
      let refunding = true;
      const sweepRefusals: string[] = [];
      const sweeping = (async () => {
        do
          for (const r of await Promise.allSettled(closed.map((s) => budgets().sweepBudget({ sessionToken: session, vaultId: s.vaultId }))))
            if (r.status === "rejected") sweepRefusals.push(String(r.reason));
        while (refunding);
      })();
      let others: Promise<PromiseSettledResult<unknown>[]>;
      try {
        const calls: Promise<unknown>[] = [
          ...Array.from({ length: 4 }, () => fund(t.bToken, open.vaultId, 10n)),
          budgets().closeBudget({ accessToken: t.bToken, vaultId: open.vaultId }),
          fund(t.rToken, t.child.vaultId, 2_000n),
          stack.admin.budgets.fundVault({ vaultId: t.owner.vaultId, amountCents: 500n }),
        ];
        // B's close (without keep_funds): before the refunds (every one then climbs to the user's vault), or racing them.
        const closeB = () => budgets().closeBudget({ accessToken: t.rToken, vaultId: t.child.vaultId });
        if (round % 2 === 1) calls.splice(round, 0, closeB());
        // Settled from the start: a call refused while B's close runs is an answer, not an unhandled rejection.
        others = Promise.allSettled(calls);
        if (round % 2 === 0) await closeB();
        await Promise.all(Array.from({ length: 6 }, () => settle()));
        while ((await settle()) > 0);
      } finally {
        refunding = false;
        await sweeping;
      }
      expect(sweepRefusals, "every sweep of a closed budget is answered").to.deep.equal([]);
      for (const r of await others) {
        // Only calls on budgets B's close ended first are refused: closed, or their agent's grant revoked.
        if (r.status === "rejected") expect([Reason.ACCESS_DENIED, Reason.INVALID_TOKEN], String(r.reason)).to.include(reasonOf(r.reason));
      }
      const failedSteps = stack.logs.lines.slice(logged).filter((l) => l.includes("settlement step failed"));
      expect(failedSteps, "no settlement step failed (a deadlock would)").to.deep.equal([]);
      expect(await Promise.all(t.payments.map((p) => settlementOf(stack, p)))).to.deep.equal(t.payments.map(() => "failed:expired"));
      // Every cent the user was given is back in their vault: the budgets' and every refund.
      const vaults = [t.child, ...t.subs].map((b) => b.vaultId);
      expect(await Promise.all(vaults.map((v) => balanceOf(stack, v)))).to.deep.equal(vaults.map(() => 0));
      expect(await balanceOf(stack, t.owner.vaultId)).to.equal(100_500);
      const stranded = await strandedVaults(stack);
      for (const v of vaults) expect(stranded).to.not.include(v);
    }
    await expectLedgerBalanced(stack);
  });

  it("a refund climbing to a vault a sweep or close holds waits for it, in the one vault order: no deadlock (PostgreSQL only)", async () => {
    // B's vault in the lower half of the order, and a budget S below it whose vault sorts after it:
    // a close of B, or a sweep of S, holds B's row while it waits for S's.
    let t: Awaited<ReturnType<typeof budgetUnderRoot>>;
    do t = await budgetUnderRoot(stack, { parentCents: 100_000n, budget: { stepUpAmountCents: undefined, chainAllowlist: ["base"] } });
    while (t.child.vaultId >= "8");
    await fund(t.parentToken, t.child.vaultId, 10_000n);
    const bToken = await grantFor(stack, t.child, { stepUp: true });
    let s: TestOwner;
    let made = 0;
    do {
      s = await subBudget(stack, t.owner, bToken, 100n);
      made++;
    } while (s.vaultId < t.child.vaultId);
    const paid = await payFrom(stack, s, 30);
    await budgets().closeBudget({ accessToken: bToken, vaultId: s.vaultId });
    stack.clock.advance(3_601_000);
    const waiting = async () =>
      Number((await stack.core.db.raw(`SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rows[0].n);
    const holder = await stack.core.db.transaction();
    await holder.raw(`SET LOCAL lock_timeout = '20s'`);
    await holder.raw(`SELECT id FROM vaults WHERE id = ? FOR UPDATE`, [t.child.vaultId]);
    const before = await waiting();
    const logged = stack.logs.lines.length;
    const settling = settle();
    while ((await waiting()) < before + 1) await new Promise((r) => setImmediate(r));
    // The refund waits for B before it touches its own vault, so the holder takes that one next.
    await holder.raw(`SELECT id FROM vaults WHERE id = ? FOR UPDATE`, [s.vaultId]);
    await holder.commit();
    await settling;
    expect(stack.logs.lines.slice(logged).filter((l) => l.includes("settlement step failed"))).to.deep.equal([]);
    expect(await settlementOf(stack, paid)).to.equal("failed:expired");
    // What the budget held and its refund are back in B (open), beside what the other budgets made hold.
    expect(await Promise.all([t.child.vaultId, s.vaultId].map((v) => balanceOf(stack, v)))).to.deep.equal([10_000 - 100 * (made - 1), 0]);
    await expectLedgerBalanced(stack);
  });
});
