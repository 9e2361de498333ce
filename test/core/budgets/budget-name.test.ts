import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor } from "../../support/budgets.js";
import { expectRefused } from "../../support/refusals.js";
import { FINE_NAMES, HOSTILE_NAMES } from "../../support/names.js";

/** CreateBudget called directly on core, as any caller could: the name follows the same rules as at the gateway. */
describe("BudgetsService.CreateBudget: display_name text rules", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ provisioningLimitPerMinute: 100_000 });
  });
  after(() => stack.close());

  it("refuses control characters, line separators, bidi controls and blank names as INVALID_REQUEST naming the field, and provisions nothing", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner, { stepUp: true });
    for (const [name, why] of HOSTILE_NAMES) {
      const params = budgetParams({ displayName: name });
      const refusal = await expectRefused(stack.clients.budgets.createBudget({ accessToken: token, ...params }), Reason.INVALID_REQUEST);
      expect(refusal.message, JSON.stringify(name))
        .to.match(/display_name/)
        .and.to.match(why);
      const made = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: params.idempotencyKey });
      expect(made, JSON.stringify(name)).to.deep.equal([]);
    }
  });

  it("takes names with inner or outer spaces, any script and up to 100 characters, unchanged", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner, { stepUp: true });
    for (const name of FINE_NAMES) {
      const res = await stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams({ displayName: name }) });
      expect(res.budget!.displayName, JSON.stringify(name)).to.equal(name);
    }
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams({ displayName: "x".repeat(101) }) }), Reason.INVALID_REQUEST);
  });
});
