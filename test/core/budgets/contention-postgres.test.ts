import { expect } from "chai";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { requirePostgres } from "../../support/db.js";
import { budgetParams, createOwner, grantFor } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

/** Real concurrency needs real connections: PGlite runs one query at a time. */
describe("BudgetsService.CreateBudget under concurrency (Postgres)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "concurrent sagas need several connections");
    stack = await startStack({ provisioningLimitPerMinute: 1000 });
  });
  after(() => stack?.close());

  it("concurrent creates on one parent vault: each succeeds or gets vault contention, never two sagas at once", async () => {
    const owner = await createOwner(stack);
    const n = 12;
    const outcomes = await Promise.all(
      Array.from({ length: n }, async () => {
        const call = stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
        try {
          return { ok: (await call).budget! };
        } catch (err) {
          return { err: await refusalOf(Promise.reject(err)) };
        }
      }),
    );
    const ok = outcomes.filter((o) => "ok" in o);
    const contended = outcomes.filter((o) => "err" in o);
    expect(ok.length).to.be.greaterThan(0);
    expect(contended.length, "some calls overlapped").to.be.greaterThan(0);
    for (const o of contended) expect(o.err!.detail?.reason).to.equal(Reason.VAULT_CONTENTION);
    for (const o of ok) expect(o.ok!.status).to.equal(BudgetStatus.DRAFT);
    // Every refused key left nothing behind; every accepted one is complete.
    const budgets = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId });
    expect(budgets.map((b) => b.status).sort()).to.deep.equal(ok.map(() => "draft"));
    const children = await stack.core.db("vaults").where({ parent_vault_id: owner.vaultId });
    expect(children.length).to.equal(ok.length);
    expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);
  });

  it("concurrent replays of one key provision it once", async () => {
    const owner = await createOwner(stack);
    const params = budgetParams();
    const tokens = await Promise.all(Array.from({ length: 8 }, () => grantFor(stack, owner)));
    const outcomes = await Promise.allSettled(tokens.map((accessToken) => stack.clients.budgets.createBudget({ accessToken, ...params })));
    const ids = new Set(outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value.budget!.vaultId] : [])));
    expect(ids.size).to.equal(1);
    for (const o of outcomes) if (o.status === "rejected") await expectRefused(Promise.reject(o.reason), Reason.VAULT_CONTENTION);
    const final = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    expect(ids.has(final.budget!.vaultId)).to.equal(true);
    expect(await stack.core.db("vaults").where({ parent_vault_id: owner.vaultId })).to.have.length(1);
  });
});
