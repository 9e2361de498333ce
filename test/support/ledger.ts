import { expect } from "chai";
import type { TestStack } from "./stack.js";

/** The operator's ledger verification finds nothing wrong. */
export async function expectLedgerVerified(stack: TestStack): Promise<void> {
  const report = await stack.admin.audit.verifyLedger({});
  expect(report.discrepancies.map((d) => d.message)).to.deep.equal([]);
  expect(report.ok).to.equal(true);
}
