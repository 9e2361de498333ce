import { expect } from "chai";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { BudgetStatus, type VaultView } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { requirePostgres } from "../../support/db.js";
import { budgetParams, createOwner, grantFor, ownerSession, payment, type TestOwner } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

const APP_URL = "http://app.vaultgate.test";

/** BudgetsService.GetMoneyView: the owner's vaults, budgets, spend against caps and recent payments. */
describe("BudgetsService.GetMoneyView", () => {
  let stack: TestStack;
  /** Holds a budget saga before its agent_principal step while set (its vault exists, status provisioning). */
  let hold: Promise<void> | undefined;
  let reached: (() => void) | undefined;

  before(async () => {
    stack = await startStack({
      appUrl: APP_URL,
      // No webhook polls: a statement count taken while one runs would count it too.
      webhookPollMs: 0,
      budgetFaults: {
        beforeStep: async (name) => {
          if (name === "agent_principal" && hold) {
            reached?.();
            await hold;
          }
        },
      },
    });
  });
  after(() => stack.close());

  async function budget(owner: TestOwner, overrides: Record<string, unknown> = {}, opts: { stepUp?: boolean; fund?: bigint } = {}) {
    stack.clock.advance(1_000); // distinct created_at: the order of budgets is well defined
    const { budget } = await stack.clients.budgets.createBudget({
      accessToken: await grantFor(stack, owner, { stepUp: opts.stepUp ?? true }),
      ...budgetParams(overrides),
    });
    if (opts.fund) await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: opts.fund });
    return { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
  }
  const pay = async (child: TestOwner, cents: bigint) => {
    stack.clock.advance(1_000); // distinct created_at: newest first is well defined
    return (await stack.clients.budgets.initiatePayment({ accessToken: await grantFor(stack, child), payment: payment({ amountCents: cents }) })).payment!;
  };
  const view = async (sessionToken: string) => (await stack.clients.budgets.getMoneyView({ sessionToken })).vaults;
  const byId = (vaults: VaultView[], id: string) => vaults.find((v) => v.vaultId === id)!;

  it("a new user: one root vault with its balance, no budget status, no policy, no payments", async () => {
    const owner = await createOwner(stack);
    await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: 12_345n });
    const vaults = await view(await ownerSession(stack, owner.userId));
    expect(vaults).to.have.length(1);
    const v = vaults[0]!;
    expect([v.vaultId, v.parentVaultId, v.agentPrincipalId, v.status, v.currency]).to.deep.equal([owner.vaultId, "", "", BudgetStatus.UNSPECIFIED, "USD"]);
    expect([v.balanceCents, v.spentTodayCents, v.spentLifetimeCents]).to.deep.equal([12_345n, 0n, 0n]);
    expect(v.limits).to.equal(undefined);
    expect(v.recentPayments).to.deep.equal([]);
  });

  it("each root vault followed by its budgets (depth first), with caps, spend and the 10 newest payments", async () => {
    stack.clock.set(new Date("2031-05-10T08:00:00Z"));
    const owner = await createOwner(stack);
    await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: 1_000n });
    const a = await budget(owner, { displayName: "Groceries", purpose: "market-research", chainAllowlist: ["base"] }, { fund: 100_000n });
    // A budget of the budget: its agent provisions one under its own vault.
    const nested = await budget(a, { displayName: "Snacks", amountCapCentsLifetime: undefined }, { fund: 500n });
    const draft = await budget(owner, { displayName: "Travel" }, { stepUp: false });

    // Yesterday's spend counts towards the lifetime only.
    await pay(a, 2_000n);
    stack.clock.set(new Date("2031-05-11T09:00:00Z"));
    for (let i = 0; i < 11; i++) await pay(a, 100n);
    const pending = await pay(a, 7_000n); // over the 5,000 step-up amount
    const declined = await pay(a, 6_000n);
    await stack.clients.budgets.declinePayment({ sessionToken: await ownerSession(stack, owner.userId), paymentId: declined.paymentId });

    const vaults = await view(await ownerSession(stack, owner.userId));
    expect(vaults.map((v) => v.vaultId)).to.deep.equal([owner.vaultId, a.vaultId, nested.vaultId, draft.vaultId]);

    const root = vaults[0]!;
    expect([root.balanceCents, root.status, root.parentVaultId]).to.deep.equal([1_000n, BudgetStatus.UNSPECIFIED, ""]);

    const va = byId(vaults, a.vaultId);
    expect([va.parentVaultId, va.agentPrincipalId, va.displayName, va.status]).to.deep.equal([
      owner.vaultId,
      a.agentPrincipalId,
      "Groceries",
      BudgetStatus.ACTIVE,
    ]);
    expect([va.balanceCents, va.spentTodayCents, va.spentLifetimeCents]).to.deep.equal([100_000n - 3_100n, 1_100n, 3_100n]);
    const l = va.limits!;
    expect([
      l.purpose,
      l.amountCapCentsPerTx,
      l.amountCapCentsPerDay,
      l.amountCapCentsLifetime,
      l.stepUpAmountCents,
      l.chainAllowlist,
      l.currency,
    ]).to.deep.equal(["market-research", 10_000n, 20_000n, 50_000n, 5_000n, ["base"], "USD"]);
    expect(va.recentPayments).to.have.length(10);
    const created = va.recentPayments.map((p) => timestampDate(p.createdAt!).getTime());
    expect(created).to.deep.equal([...created].sort((x, y) => y - x));
    expect(va.recentPayments[0]!.paymentId).to.equal(declined.paymentId);
    expect([va.recentPayments[0]!.status, va.recentPayments[0]!.stepUpUrl]).to.deep.equal([PaymentStatus.DECLINED, ""]);
    expect(va.recentPayments[1]!.paymentId).to.equal(pending.paymentId);
    expect(va.recentPayments[1]!.status).to.equal(PaymentStatus.PENDING_STEP_UP);
    expect(va.recentPayments[1]!.stepUpUrl).to.equal(`${APP_URL}/dashboard/agents/${a.agentPrincipalId}?payment=${pending.paymentId}`);
    expect(va.recentPayments.slice(2).map((p) => [p.status, p.amountCents])).to.deep.equal(Array.from({ length: 8 }, () => [PaymentStatus.COMPLETED, 100n]));
    expect(va.recentPayments[2]!.counterparty).to.deep.include({ chain: "base", token: "USDC" });

    const vn = byId(vaults, nested.vaultId);
    expect([vn.parentVaultId, vn.displayName, vn.status, vn.balanceCents]).to.deep.equal([a.vaultId, "Snacks", BudgetStatus.ACTIVE, 500n]);
    expect(vn.limits!.amountCapCentsLifetime).to.equal(undefined);

    const vd = byId(vaults, draft.vaultId);
    expect([vd.parentVaultId, vd.displayName, vd.status, vd.balanceCents, vd.recentPayments.length]).to.deep.equal([
      owner.vaultId,
      "Travel",
      BudgetStatus.DRAFT,
      0n,
      0,
    ]);
    expect(vd.limits!.amountCapCentsPerDay).to.equal(20_000n);

    // The next UTC day: nothing spent today, the lifetime unchanged.
    stack.clock.set(new Date("2031-05-12T00:00:01Z"));
    const tomorrow = byId(await view(await ownerSession(stack, owner.userId)), a.vaultId);
    expect([tomorrow.spentTodayCents, tomorrow.spentLifetimeCents]).to.deep.equal([0n, 3_100n]);
  });

  it("a declined budget is listed as declined; a budget still provisioning is not listed", async () => {
    const owner = await createOwner(stack);
    const declined = await budget(owner, { displayName: "No thanks" }, { stepUp: false });
    const session = await ownerSession(stack, owner.userId);
    await stack.clients.budgets.declineBudget({ sessionToken: session, agentPrincipalId: declined.agentPrincipalId });

    let release!: () => void;
    hold = new Promise<void>((r) => (release = r));
    const atStep = new Promise<void>((r) => (reached = r));
    stack.clock.advance(1_000); // created after the declined one: the order is well defined
    const creating = stack.clients.budgets.createBudget({
      accessToken: await grantFor(stack, owner, { stepUp: true }),
      ...budgetParams({ displayName: "Mid-flight" }),
    });
    try {
      await atStep;
      const provisioning = await stack.core.db("budgets").where({ user_id: owner.userId, status: "provisioning" }).first();
      expect(await stack.core.db("vaults").where({ id: provisioning.vault_id }).first()).to.not.equal(undefined);
      const vaults = await view(session);
      expect(vaults.map((v) => v.vaultId)).to.deep.equal([owner.vaultId, declined.vaultId]);
      expect(byId(vaults, declined.vaultId).status).to.equal(BudgetStatus.DECLINED);
    } finally {
      hold = undefined;
      release();
    }
    const { budget: done } = await creating;
    expect((await view(session)).map((v) => v.vaultId)).to.deep.equal([owner.vaultId, declined.vaultId, done!.vaultId]);
  });

  it("a closed budget reads CLOSED", async () => {
    const owner = await createOwner(stack);
    const b = await budget(owner);
    await stack.core.db("budgets").where({ vault_id: b.vaultId }).update({ status: "closed" });
    expect(byId(await view(await ownerSession(stack, owner.userId)), b.vaultId).status).to.equal(BudgetStatus.CLOSED);
  });

  it("shows only the caller's own vaults, and refuses a missing, random or ended session", async () => {
    const owner = await createOwner(stack);
    const b = await budget(owner, {}, { fund: 1_000n });
    await pay(b, 100n);
    const stranger = await createOwner(stack);
    const theirs = await view(await ownerSession(stack, stranger.userId));
    expect(theirs.map((v) => v.vaultId)).to.deep.equal([stranger.vaultId]);

    for (const token of ["", "vgs_not-a-session", "x".repeat(300)]) {
      expect((await refusalOf(stack.clients.budgets.getMoneyView({ sessionToken: token }))).detail?.reason, token.slice(0, 10)).to.equal(Reason.INVALID_TOKEN);
    }
    const ended = await ownerSession(stack, owner.userId);
    await stack.clients.grants.endSession({ sessionToken: ended });
    await expectRefused(stack.clients.budgets.getMoneyView({ sessionToken: ended }), Reason.INVALID_TOKEN);
  });

  it("sends the same number of statements for one vault as for many (no query per vault)", async () => {
    const count = async (sessionToken: string) => {
      let n = 0;
      const listener = () => void n++;
      stack.core.db.on("query", listener);
      try {
        await view(sessionToken);
      } finally {
        stack.core.db.off("query", listener);
      }
      return n;
    };
    const small = await createOwner(stack);
    const big = await createOwner(stack);
    for (let i = 0; i < 6; i++) {
      const b = await budget(big, {}, { fund: 1_000n });
      await pay(b, 100n);
    }
    const few = await count(await ownerSession(stack, small.userId));
    const many = await count(await ownerSession(stack, big.userId));
    expect(many).to.equal(few);
    expect(many).to.be.at.most(6); // session lookup, BEGIN, SET TRANSACTION, two reads, COMMIT
  });

  it("every view taken while payments complete concurrently is one snapshot", async function () {
    requirePostgres(this, "PGlite runs one statement at a time, so nothing is concurrent");
    this.timeout(60_000);
    const owner = await createOwner(stack);
    const b = await budget(owner, { stepUpAmountCents: undefined }, { fund: 10_000n });
    const session = await ownerSession(stack, owner.userId);
    const tokens = await Promise.all(Array.from({ length: 10 }, () => grantFor(stack, b)));
    const views: VaultView[] = [];
    let paying = true;
    const payments = Promise.allSettled(
      tokens.map((t) => stack.clients.budgets.initiatePayment({ accessToken: t, payment: payment({ amountCents: 100n }) })),
    ).finally(() => {
      paying = false;
    });
    const readers = Array.from({ length: 4 }, async () => {
      do views.push(byId(await view(session), b.vaultId));
      while (paying);
    });
    await Promise.all([payments, ...readers]);
    expect((await payments).every((r) => r.status === "fulfilled")).to.equal(true);
    views.push(byId(await view(session), b.vaultId));
    for (const v of views) {
      // At most 10 payments: the recent list is the whole history, so it must agree with the totals.
      const completed = v.recentPayments.filter((p) => p.status === PaymentStatus.COMPLETED).reduce((s, p) => s + p.amountCents, 0n);
      expect(completed).to.equal(v.spentLifetimeCents);
      expect(v.balanceCents + v.spentLifetimeCents).to.equal(10_000n);
    }
    expect(views.at(-1)!.spentLifetimeCents).to.equal(1_000n);
  });
});
