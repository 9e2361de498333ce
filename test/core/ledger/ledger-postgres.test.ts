import { expect } from "chai";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { accountId } from "../../../core/ledger/accounts.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { requirePostgres } from "../../support/db.js";
import { budgetParams, createOwner, grantFor, payment } from "../../support/budgets.js";

/**
 * The ledger under real concurrency: payments and funding racing on one vault each post
 * exactly one balanced transaction, and the vault's balance always equals its postings.
 * PGlite runs one statement at a time and would hide every race, so this runs on Postgres.
 */
describe("Ledger under concurrency (Postgres)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "concurrent movements need several connections");
    stack = await startStack();
  });
  after(() => stack?.close());

  it("200 concurrent payments and 50 concurrent fundings of one budget vault: one transaction each, verify clean", async () => {
    const owner = await createOwner(stack);
    const params = budgetParams({
      amountCapCentsPerTx: 1_000n,
      amountCapCentsPerDay: undefined,
      amountCapCentsLifetime: undefined,
      stepUpAmountCents: undefined,
    });
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...params });
    const vaultId = budget!.vaultId;
    await stack.admin.budgets.fundVault({ vaultId, amountCents: 50_000n });
    const child = { userId: owner.userId, vaultId, agentPrincipalId: budget!.agentPrincipalId };
    const tokens = await Promise.all(Array.from({ length: 5 }, () => grantFor(stack, child)));
    // 200 x $3 against $500 (+ 50 x $1 funded meanwhile): some succeed, the rest are refused for funds.
    const outcomes = await Promise.allSettled([
      ...Array.from({ length: 200 }, (_, i) =>
        stack.clients.budgets.initiatePayment({ accessToken: tokens[i % tokens.length]!, payment: payment({ amountCents: 300n }) }),
      ),
      ...Array.from({ length: 50 }, () => stack.admin.budgets.fundVault({ vaultId, amountCents: 100n })),
    ]);
    const paid = outcomes
      .slice(0, 200)
      .filter((o) => o.status === "fulfilled" && "payment" in o.value && o.value.payment!.status === PaymentStatus.COMPLETED).length;
    expect(outcomes.slice(200).every((o) => o.status === "fulfilled")).to.equal(true);
    expect(paid).to.be.greaterThan(0);
    const db = stack.core.db;
    const vault = await db("vaults").where({ id: vaultId }).first("balance_cents");
    expect(Number(vault.balance_cents)).to.equal(50_000 + 50 * 100 - paid * 300);
    const legs = await db("ledger_postings").where({ account_id: accountId("vault", vaultId, "USD") });
    expect(legs.filter((l) => Number(l.amount_cents) === -300)).to.have.length(paid);
    expect(legs.filter((l) => Number(l.amount_cents) === 100)).to.have.length(50);
    const payments = await db("agent_payments").where({ vault_id: vaultId, status: "completed" }).pluck("id");
    const txs = await db("ledger_transactions").whereIn("id", payments).pluck("kind");
    expect(txs).to.have.length(paid);
    expect(new Set(txs)).to.deep.equal(new Set(["payment"]));
    const report = await stack.admin.audit.verifyLedger({});
    expect(report.discrepancies).to.deep.equal([]);
  });
});
