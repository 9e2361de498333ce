import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Decision, PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import * as spendTotals from "../../../core/db/migrations/0018-vault-spend-totals.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { grantFor, payment } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { fundedChild, totalsAndSums } from "../../support/spend.js";

describe("Running spend totals (caps without reading payment history)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
    stack.clock.set(new Date("2031-03-10T12:00:00Z"));
  });
  after(() => stack?.close());

  it("a vault with thousands of past payments (backfilled by the migration) still evaluates per-day and lifetime caps exactly", async () => {
    // 20,000 seeded payments of 100 cents = 2,000,000; the lifetime cap leaves 4,500 more.
    const funded = await fundedChild(stack, { perDay: 5_000n, lifetime: 2_004_500n });
    const child = funded.child;
    let token = funded.token;
    const now = stack.clock();
    // 19,990 payments on earlier days, 10 of 100 cents today (1,000 of the 5,000 day cap).
    await stack.core.db.raw(
      `INSERT INTO agent_payments (id, vault_id, user_id, agent_principal_id, grant_id, idempotency_key, params_hash, address, chain, token,
                                   amount_cents, currency, status, created_at, completed_at)
       SELECT gen_random_uuid(), ?, ?, ?, 'seed', 'seed-' || i, 'h', '0xabc0000000000000000000000000000000000001', 'base', 'USDC', 100, 'USD', 'completed', t, t
         FROM generate_series(1, 20000) i,
              LATERAL (SELECT CASE WHEN i <= 10 THEN ?::timestamptz - make_interval(secs => i)
                                   ELSE ?::timestamptz - make_interval(days => 1 + i % 400) END AS t) x`,
      [child.vaultId, child.userId, child.agentPrincipalId, now, now],
    );
    // Pending and declined payments count for nothing.
    await stack.core.db.raw(
      `INSERT INTO agent_payments (id, vault_id, user_id, agent_principal_id, grant_id, idempotency_key, params_hash, address, chain, token,
                                   amount_cents, currency, status, created_at)
       VALUES (?, ?, ?, ?, 'seed', 'seed-pending', 'h', '0xabc0000000000000000000000000000000000001', 'base', 'USDC', 999, 'USD', 'pending_step_up', ?)`,
      [randomUUID(), child.vaultId, child.userId, child.agentPrincipalId, now],
    );
    // Recompute every vault's totals from its payments, as the migration does on upgrade.
    await spendTotals.down(stack.core.db);
    await spendTotals.up(stack.core.db);
    const seeded = await totalsAndSums(stack, child.vaultId);
    expect(seeded.totals).to.deep.equal(seeded.sums);
    expect(seeded.totals).to.include({ lifetime: 2_000_000, day: "2031-03-10", dayCents: 1_000 });

    const simulate = (amountCents: bigint) => stack.clients.budgets.simulatePayment({ accessToken: token, payment: payment({ amountCents }) });
    const pay = (amountCents: bigint) => stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment({ amountCents }) });
    // Day cap: 4,000 left today.
    expect((await simulate(1_000n)).decision).to.equal(Decision.ACCEPT);
    for (let i = 0; i < 4; i++) expect((await pay(1_000n)).payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect(await simulate(1n)).to.deep.include({ decision: Decision.DENY, rule: "per_day_cap" });
    const denied = await expectRefused(pay(1n), Reason.POLICY_DENIED);
    expect(denied.detail?.limitName).to.equal("per_day_cap");
    // Next UTC day: the day cap starts afresh and the lifetime cap (500 left) binds.
    stack.clock.set(new Date("2031-03-11T00:00:00Z"));
    token = await grantFor(stack, child); // the first one has expired meanwhile
    expect(await simulate(501n)).to.deep.include({ decision: Decision.DENY, rule: "lifetime_cap" });
    expect((await simulate(500n)).decision).to.equal(Decision.ACCEPT);
    expect((await pay(500n)).payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect((await refusalOf(pay(1n))).detail?.limitName).to.equal("lifetime_cap");
    const after = await totalsAndSums(stack, child.vaultId);
    expect(after.totals).to.deep.equal(after.sums);
  });

  it("lifetime cap on a long history: the payment that reaches the cap exactly is accepted, one cent more is not", async () => {
    stack.clock.set(new Date("2031-04-01T09:00:00Z"));
    const { child, token } = await fundedChild(stack, { lifetime: 500_000n });
    const now = stack.clock();
    await stack.core.db.raw(
      `INSERT INTO agent_payments (id, vault_id, user_id, agent_principal_id, grant_id, idempotency_key, params_hash, address, chain, token,
                                   amount_cents, currency, status, created_at, completed_at)
       SELECT gen_random_uuid(), ?, ?, ?, 'seed', 'seed-' || i, 'h', '0xabc0000000000000000000000000000000000001', 'base', 'USDC', 99, 'USD', 'completed', t, t
         FROM generate_series(1, 5000) i, LATERAL (SELECT ?::timestamptz - make_interval(hours => i) AS t) x`,
      [child.vaultId, child.userId, child.agentPrincipalId, now],
    );
    await spendTotals.down(stack.core.db);
    await spendTotals.up(stack.core.db);
    // 495,000 spent; 5,000 left, at most 1,000 per payment.
    const pay = (amountCents: bigint) => stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment({ amountCents }) });
    for (let i = 0; i < 5; i++) expect((await pay(1_000n)).payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect((await refusalOf(pay(1n))).detail?.limitName).to.equal("lifetime_cap");
    const t = await totalsAndSums(stack, child.vaultId);
    expect(t.totals).to.deep.equal(t.sums);
    expect(t.totals.lifetime).to.equal(500_000);
  });

  it("a payment stamped before midnight but completed after a later-stamped one counts towards its own day and the next", async () => {
    stack.clock.set(new Date("2031-05-01T23:59:59Z"));
    const { child, token } = await fundedChild(stack, { perDay: 3_000n });
    const pay = (amountCents: bigint) => stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment({ amountCents }) });
    await pay(1_000n); // 1 May: 1,000
    stack.clock.set(new Date("2031-05-02T00:00:01Z"));
    await pay(1_000n); // 2 May: 1,000
    // A clock a second behind (another replica's, or a payment that read the time before
    // waiting for the vault lock): its "today" is 1 May, and everything since then counts.
    stack.clock.set(new Date("2031-05-01T23:59:59Z"));
    expect((await pay(1_000n)).payment!.status).to.equal(PaymentStatus.COMPLETED); // 1 May + 2 May = 3,000
    expect((await refusalOf(pay(1n))).detail?.limitName).to.equal("per_day_cap");
    stack.clock.set(new Date("2031-05-02T00:00:02Z"));
    // 2 May alone: 1,000 spent, 2,000 left.
    expect((await pay(1_000n)).payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect((await pay(1_000n)).payment!.status).to.equal(PaymentStatus.COMPLETED);
    expect((await refusalOf(pay(1n))).detail?.limitName).to.equal("per_day_cap");
    const t = await totalsAndSums(stack, child.vaultId);
    expect(t.totals).to.deep.equal(t.sums);
    expect(t.totals).to.deep.equal({ lifetime: 5_000, day: "2031-05-02", dayCents: 3_000, prevCents: 2_000 });
  });
});
