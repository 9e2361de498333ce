import { expect } from "chai";
import type { StepName } from "../../../core/budgets/records.js";
import { budgetParams, createOwner, grantFor } from "../../support/budgets.js";
import { refusalOf } from "../../support/refusals.js";
import { startStack } from "../../support/stack.js";

/** The reaper as `vaultgate serve` runs it: on its own, every interval, and stopped by close. */
describe("the scheduled provisioning reaper (core/core.ts)", () => {
  it("finishes a partial cleanup without being asked, retries while a fault lasts, and stops at close", async () => {
    let failing: { name: StepName; phase: "run" | "compensate" }[] = [
      { name: "policy", phase: "run" },
      { name: "vault", phase: "compensate" },
    ];
    let compensations = 0;
    const stack = await startStack({
      reaperIntervalMs: 5,
      budgetFaults: {
        step: (name, phase) => {
          if (phase === "compensate") compensations++;
          return failing.some((f) => f.name === name && f.phase === phase) ? new Error(`injected ${phase} fault in ${name}`) : undefined;
        },
      },
    });
    try {
      const owner = await createOwner(stack);
      const params = budgetParams();
      expect(
        (await refusalOf(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params }))).detail!.provisioning!.cleanup,
      ).to.equal("partial");
      const budget = () => stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: params.idempotencyKey }).first();
      // Passes keep coming while the fault lasts, and leave the record for the next one.
      const before = compensations;
      while (compensations < before + 3) await new Promise((r) => setTimeout(r, 5));
      expect((await budget()).status).to.equal("cleanup_pending");
      failing = [];
      for (let i = 0; i < 2000 && (await budget()).status !== "failed"; i++) await new Promise((r) => setTimeout(r, 5));
      expect((await budget()).status).to.equal("failed");
    } finally {
      await stack.close();
    }
    // Stopped: no pass runs after close.
    const after = compensations;
    await new Promise((r) => setTimeout(r, 50));
    expect(compensations).to.equal(after);
    expect(stack.logs.lines.filter((l) => /reaper pass failed/.test(l))).to.deep.equal([]);
  });
});
