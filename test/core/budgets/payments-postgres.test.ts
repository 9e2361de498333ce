import { expect } from "chai";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import knexFactory from "knex";
import { requirePostgres, testDatabase } from "../../support/db.js";
import { budgetParams, createOwner, grantFor, payment } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * Caps and revocation under real concurrency. PGlite runs one statement at a time and
 * would hide every race here, so these run in CI's PostgreSQL pass only.
 */
describe("BudgetsService.InitiatePayment under concurrency (Postgres)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "concurrent payments need several connections");
    stack = await startStack();
  });
  after(() => stack?.close());

  async function fundedBudget(caps: { perDay?: bigint; lifetime?: bigint }) {
    const owner = await createOwner(stack);
    const params = budgetParams({
      amountCapCentsPerTx: 1_000n,
      amountCapCentsPerDay: caps.perDay,
      amountCapCentsLifetime: caps.lifetime,
      stepUpAmountCents: undefined,
    });
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...params });
    await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: 1_000_000n });
    return { owner, child: { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId } };
  }

  for (const [name, caps] of [
    ["per-day", { perDay: 5_000n }],
    ["lifetime", { lifetime: 3_000n }],
  ] as const) {
    it(`50 concurrent $10 payments against a ${name} cap: exactly the cap is spent, the rest are policy_denied`, async () => {
      const { child } = await fundedBudget(caps);
      const tokens = await Promise.all(Array.from({ length: 5 }, () => grantFor(stack, child)));
      const outcomes = await Promise.allSettled(
        Array.from({ length: 50 }, (_, i) =>
          stack.clients.budgets.initiatePayment({ accessToken: tokens[i % tokens.length]!, payment: payment({ amountCents: 1_000n }) }),
        ),
      );
      const accepted = outcomes.filter((o) => o.status === "fulfilled" && o.value.payment!.status === PaymentStatus.COMPLETED);
      const cap = Number(caps.perDay ?? caps.lifetime) / 1_000;
      expect(accepted).to.have.length(cap);
      for (const o of outcomes) {
        if (o.status === "rejected") await expectRefused(Promise.reject(o.reason), Reason.POLICY_DENIED);
      }
      const vault = await stack.core.db("vaults").where({ id: child.vaultId }).first("balance_cents");
      expect(Number(vault.balance_cents)).to.equal(1_000_000 - cap * 1_000);
    });
  }

  it("payments racing a revocation: none commits after the revocation did", async () => {
    const { child } = await fundedBudget({});
    const token = await grantFor(stack, child);
    const { jti } = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { jti: string };
    // An outside connection, as the dashboard of another replica: core's pool is busy with the payments.
    const outside = knexFactory({ client: "pg", connection: (await testDatabase()).url!, pool: { min: 1, max: 1 } });
    const completed = async () =>
      Number((await outside.raw(`SELECT count(*)::int AS n FROM agent_payments WHERE grant_id = ? AND status = 'completed'`, [jti])).rows[0].n);
    expect(await completed()).to.equal(0); // connected before the payments start
    const calls = Array.from({ length: 300 }, () => stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment({ amountCents: 100n }) }));
    // Revoke while payments are queued on the grant and vault locks. The UPDATE waits for the
    // payments holding the grant's lock; once it has committed, no payment may.
    while ((await completed()) < 5) await new Promise((r) => setImmediate(r));
    await outside("grants").where({ id: jti }).update({ state: "revoked", state_changed_at: new Date(), state_reason: "user_revocation" });
    const atRevocation = await completed();
    const outcomes = await Promise.allSettled(calls);
    const final = await completed();
    await outside.destroy();
    expect(final).to.equal(atRevocation);
    const refused = outcomes.filter((o) => o.status === "rejected");
    expect(refused.length).to.be.greaterThan(0);
    for (const o of refused) await expectRefused(Promise.reject(o.reason), Reason.INVALID_TOKEN);
    expect(outcomes.filter((o) => o.status === "fulfilled")).to.have.length(atRevocation);
  });
});
