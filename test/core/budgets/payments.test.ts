import { expect } from "chai";
import { Decision, PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, futureTimestamp, grantFor, ownerSession, payment, type TestOwner } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

const APP_URL = "http://app.vaultgate.test";

describe("BudgetsService payments, balance and audit", () => {
  let stack: TestStack;
  let owner: TestOwner;
  /** The child agent's view: a grant on the budget's vault. */
  let child: TestOwner;

  before(async () => {
    stack = await startStack({ appUrl: APP_URL });
  });
  after(() => stack.close());

  async function budget(overrides: Record<string, unknown> = {}, stepUp = true, fundCents = 100_000n) {
    owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp }), ...budgetParams(overrides) });
    if (fundCents > 0n) await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: fundCents });
    child = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    return budget!;
  }
  const pay = async (p: ReturnType<typeof payment>, scopes?: string[]) =>
    stack.clients.budgets.initiatePayment({ accessToken: await grantFor(stack, child, scopes ? { scopes } : {}), payment: p });
  const simulate = async (p: ReturnType<typeof payment>) => stack.clients.budgets.simulatePayment({ accessToken: await grantFor(stack, child), payment: p });
  const balance = async () => Number((await stack.clients.budgets.getBalance({ accessToken: await grantFor(stack, child) })).balanceCents);
  const denial = async (p: ReturnType<typeof payment>) => (await refusalOf(pay(p))).detail;

  it("accepts a payment within the policy, debits the vault once, and replays idempotently", async () => {
    await budget();
    const p = payment({ amountCents: 1_500n });
    const first = await pay(p);
    expect(first.payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect(first.payment!.stepUpUrl).to.equal("");
    expect(await balance()).to.equal(98_500);
    const again = await pay(p);
    expect(again.payment!.paymentId).to.equal(first.payment!.paymentId);
    expect(await balance()).to.equal(98_500);
    await expectRefused(pay({ ...p, amountCents: 1_600n }), Reason.IDEMPOTENCY_CONFLICT);
  });

  it("enforces per-tx, per-day and lifetime caps, naming the limit and never the remaining allowance", async () => {
    await budget({ amountCapCentsPerTx: 10_000n, amountCapCentsPerDay: 15_000n, amountCapCentsLifetime: 25_000n, stepUpAmountCents: undefined });
    const perTx = await denial(payment({ amountCents: 10_001n }));
    expect([perTx?.reason, perTx?.limitName]).to.deep.equal([Reason.POLICY_DENIED, "per_tx_cap"]);
    await pay(payment({ amountCents: 10_000n }));
    const perDay = await denial(payment({ amountCents: 5_001n }));
    expect([perDay?.reason, perDay?.limitName]).to.deep.equal([Reason.POLICY_DENIED, "per_day_cap"]);
    await pay(payment({ amountCents: 5_000n }));
    stack.clock.advance(86_400_000);
    await pay(payment({ amountCents: 10_000n }));
    const lifetime = await denial(payment({ amountCents: 1n }));
    expect([lifetime?.reason, lifetime?.limitName]).to.deep.equal([Reason.POLICY_DENIED, "lifetime_cap"]);
    expect(await balance()).to.equal(75_000);
    const audit = await stack.core
      .db("audit_records")
      .where({ actor: `agent:${child.agentPrincipalId}`, outcome: "failure" })
      .orderBy("seq");
    expect(audit.map((a) => a.reason)).to.deep.equal(["policy_denied:per_tx_cap", "policy_denied:per_day_cap", "policy_denied:lifetime_cap"]);
  });

  it("enforces the chain allowlist, time_window_end, the balance and an installed policy", async () => {
    await budget({ timeWindowEnd: futureTimestamp(stack, 3_600_000) }, true, 2_000n);
    expect((await denial(payment({ chain: "sol" })))?.limitName).to.equal("chain_allowlist");
    expect((await denial(payment({ amountCents: 2_001n })))?.reason).to.equal(Reason.INSUFFICIENT_FUNDS);
    stack.clock.advance(3_600_000);
    expect((await denial(payment()))?.limitName).to.equal("time_window_end");

    await budget({}, false);
    expect((await denial(payment()))?.limitName).to.equal("policy_inactive");
    await expectRefused(pay(payment({ currency: "EUR" })), Reason.INVALID_REQUEST);
  });

  it("needs payments:initiate (and payments:simulate, accounts:read for the other calls)", async () => {
    await budget();
    await expectRefused(pay(payment(), ["payments:simulate"]), Reason.INSUFFICIENT_SCOPE);
    const initiateOnly = await grantFor(stack, child, { scopes: ["payments:initiate"] });
    await expectRefused(stack.clients.budgets.simulatePayment({ accessToken: initiateOnly, payment: payment() }), Reason.INSUFFICIENT_SCOPE);
    await expectRefused(stack.clients.budgets.getBalance({ accessToken: initiateOnly }), Reason.INSUFFICIENT_SCOPE);
  });

  it("lists one pending payment by its id to its owner only, and no draft budget with it", async () => {
    await budget({ stepUpAmountCents: 5_000n });
    const [a, b] = [(await pay(payment({ amountCents: 7_000n }))).payment!, (await pay(payment({ amountCents: 8_000n }))).payment!];
    await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, child), ...budgetParams() }); // a draft under the budget
    const sessionToken = await ownerSession(stack, owner.userId);
    const all = await stack.clients.budgets.listPendingApprovals({ sessionToken });
    expect([all.pendingPayments.length, all.draftBudgets.length]).to.deep.equal([2, 1]);
    const one = await stack.clients.budgets.listPendingApprovals({ sessionToken, paymentId: b.paymentId.toUpperCase() });
    expect([one.pendingPayments.map((x) => x.paymentId), one.draftBudgets]).to.deep.equal([[b.paymentId], []]);
    const outsider = await ownerSession(stack, (await createOwner(stack)).userId);
    const theirs = await stack.clients.budgets.listPendingApprovals({ sessionToken: outsider, paymentId: a.paymentId });
    expect([theirs.pendingPayments, theirs.draftBudgets]).to.deep.equal([[], []]);
    await expectRefused(stack.clients.budgets.listPendingApprovals({ sessionToken, paymentId: "x'; --" }), Reason.INVALID_REQUEST);
    await expectRefused(
      stack.clients.budgets.listPendingApprovals({ sessionToken, paymentId: a.paymentId, budgetsCursor: "junk" }),
      Reason.INVALID_REQUEST,
      /no cursor/,
    );
    await stack.clients.budgets.declinePayment({ sessionToken, paymentId: a.paymentId });
    expect((await stack.clients.budgets.listPendingApprovals({ sessionToken, paymentId: a.paymentId })).pendingPayments).to.deep.equal([]);
  });

  it("over the step-up amount: pending with a step_up_url; after the owner's step-up approval the same call completes", async () => {
    await budget({ stepUpAmountCents: 5_000n });
    const p = payment({ amountCents: 7_000n });
    const pending = await pay(p);
    expect(pending.payment!.status).to.equal(PaymentStatus.PENDING_STEP_UP);
    const id = pending.payment!.paymentId;
    expect(pending.payment!.stepUpUrl).to.equal(`${APP_URL}/dashboard/agents/${child.agentPrincipalId}?payment=${id}`);
    expect(await balance()).to.equal(100_000);
    expect((await pay(p)).payment!.status).to.equal(PaymentStatus.PENDING_STEP_UP);

    const sessionToken = await ownerSession(stack, owner.userId);
    const listed = await stack.clients.budgets.listPendingApprovals({ sessionToken });
    expect(listed.pendingPayments.map((x) => x.paymentId)).to.deep.equal([id]);
    // One agent's approvals: this budget's agent has the payment, another agent none; a malformed id is refused.
    const mine = await stack.clients.budgets.listPendingApprovals({ sessionToken, agentPrincipalId: child.agentPrincipalId.toUpperCase() });
    expect(mine.pendingPayments.map((x) => x.paymentId)).to.deep.equal([id]);
    const other = await stack.clients.budgets.listPendingApprovals({ sessionToken, agentPrincipalId: owner.agentPrincipalId });
    expect(other.pendingPayments).to.deep.equal([]);
    // Another person naming this agent sees nothing of it.
    const outsider = await ownerSession(stack, (await createOwner(stack)).userId);
    const theirs = await stack.clients.budgets.listPendingApprovals({ sessionToken: outsider, agentPrincipalId: child.agentPrincipalId });
    expect([theirs.pendingPayments, theirs.draftBudgets]).to.deep.equal([[], []]);
    await expectRefused(stack.clients.budgets.listPendingApprovals({ sessionToken, agentPrincipalId: "x'; --" }), Reason.INVALID_REQUEST);

    // Without a step-up on the session (core reads it; the caller cannot claim one).
    await expectRefused(stack.clients.budgets.approvePayment({ sessionToken, paymentId: id }), Reason.ACCESS_DENIED);
    const stranger = await createOwner(stack);
    const strangerSession = await ownerSession(stack, stranger.userId, { stepUp: true });
    await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: strangerSession, paymentId: id }), Reason.NOT_FOUND);
    await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: "vgs_forged", paymentId: id }), Reason.INVALID_TOKEN);
    const stepped = await ownerSession(stack, owner.userId, { stepUp: true });
    await expectRefused(stack.clients.budgets.approvePayment({ sessionToken: stepped, paymentId: "x'; --" }), Reason.NOT_FOUND);
    const approved = await stack.clients.budgets.approvePayment({ sessionToken: stepped, paymentId: id });
    expect(approved.payment!.status).to.equal(PaymentStatus.APPROVED);
    expect(await balance()).to.equal(100_000);

    const done = await pay(p);
    expect(done.payment!.paymentId).to.equal(id);
    expect(done.payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect(await balance()).to.equal(93_000);
    expect((await pay(p)).payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect(await balance()).to.equal(93_000);
  });

  it("simulate names the deciding rule and has no side effects", async () => {
    await budget({ amountCapCentsPerTx: 10_000n, stepUpAmountCents: 5_000n }, true, 8_000n);
    const cases: [ReturnType<typeof payment>, Decision, string][] = [
      [payment({ amountCents: 100n }), Decision.ACCEPT, ""],
      [payment({ amountCents: 6_000n }), Decision.STEP_UP, "step_up_amount"],
      [payment({ amountCents: 10_001n }), Decision.DENY, "per_tx_cap"],
      [payment({ amountCents: 9_000n }), Decision.DENY, "balance"],
      [payment({ chain: "op" }), Decision.DENY, "chain_allowlist"],
    ];
    for (const [p, decision, rule] of cases) {
      const r = await simulate(p);
      expect([r.decision, r.rule]).to.deep.equal([decision, rule]);
    }
    expect(await balance()).to.equal(8_000);
    expect(await stack.core.db("agent_payments").where({ vault_id: child.vaultId })).to.deep.equal([]);
  });

  it("FundVault is an admin RPC and credits the vault", async () => {
    await budget({}, true, 0n);
    await expectRefused(stack.clients.budgets.fundVault({ vaultId: child.vaultId, amountCents: 5n }), Reason.ADMIN_UNAUTHENTICATED);
    const funded = await stack.admin.budgets.fundVault({ vaultId: child.vaultId, amountCents: 5n });
    expect(funded.balanceCents).to.equal(5n);
    await expectRefused(stack.admin.budgets.fundVault({ vaultId: child.vaultId, amountCents: 0n }), Reason.INVALID_REQUEST);
    await expectRefused(stack.admin.budgets.fundVault({ vaultId: "00000000-0000-4000-8000-000000000000", amountCents: 1n }), Reason.NOT_FOUND);
  });

  it("lists the grant's audit records with cursor paging and a since watermark", async () => {
    await budget();
    for (let i = 0; i < 3; i++) await pay(payment({ amountCents: 100n }));
    const accessToken = await grantFor(stack, child);
    const page1 = await stack.clients.budgets.listGrantAudit({ accessToken, limit: 2 });
    expect(page1.records.map((r) => r.action)).to.deep.equal(["payments.initiate", "payments.initiate"]);
    expect(page1.nextCursor).to.not.equal("");
    const page2 = await stack.clients.budgets.listGrantAudit({ accessToken, limit: 2, cursor: page1.nextCursor });
    expect(page2.records).to.have.length(1);
    expect(page2.nextCursor).to.equal("");
    const since = await stack.clients.budgets.listGrantAudit({ accessToken, since: page2.watermark });
    expect(since.records).to.deep.equal([]);
    expect(since.watermark).to.equal(page2.watermark);
    // Another agent's cursor, or a tampered one, is refused.
    await expectRefused(stack.clients.budgets.listGrantAudit({ accessToken: await grantFor(stack, owner), cursor: page1.nextCursor }), Reason.INVALID_CURSOR);
    await expectRefused(stack.clients.budgets.listGrantAudit({ accessToken, cursor: "x.y" }), Reason.INVALID_CURSOR);
    await expectRefused(
      stack.clients.budgets.listGrantAudit({ accessToken: await grantFor(stack, child, { scopes: ["accounts:read"] }) }),
      Reason.INSUFFICIENT_SCOPE,
    );
  });
});
