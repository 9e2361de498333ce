import { expect } from "chai";
import type { PrivateKeyAccount } from "viem/accounts";
import { createEvmRail, type EvmRail } from "../../core/settlement/evm-rail.js";
import { verifyChains } from "../../core/settlement/verify-chains.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { Anvil } from "../support/anvil.js";
import { payOnBase, sendOutsideVaultgate, startEvmRailStack } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * The books against the chain (AuditService.VerifyChains, `ledger verify --chains`): every
 * outgoing USDC transfer of the hot wallet is one completed payment, and the balances add up.
 */
describe("books that match the chain (anvil)", function () {
  this.timeout(180_000);
  let anvil: Anvil;
  let stack: McpStack;
  let account: PrivateKeyAccount;
  let wallet: string;

  before(async () => {
    ({ anvil, account, stack, wallet } = await startEvmRailStack(startMcpStack, 10_000_000));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  /** Pays `amounts` from a fresh funded budget on base and settles them to completed. */
  async function payAndSettle(amounts: number[]): Promise<string[]> {
    const ids = await payOnBase(stack, anvil, amounts);
    for (const id of ids) {
      const row = await stack.core.db("settlement_payments").where({ payment_id: id }).first();
      expect(row.status, id).to.equal("completed");
    }
    return ids;
  }

  it("passes clean books, also asked many times at once", async () => {
    await payAndSettle([1_500, 250, 99]);
    const results = await Promise.all(Array.from({ length: 8 }, () => stack.admin.audit.verifyChains({})));
    for (const r of results) {
      expect(r.differences.map((d) => d.message)).to.deep.equal([]);
      expect(r.ok).to.equal(true);
      expect(r.chains).to.have.length(1);
      expect(r.chains[0]).to.deep.include({ chain: "base", wallet, outgoingUnits: `${centsToUnits(1_849)}`, ledgerOutflowUnits: `${centsToUnits(1_849)}` });
    }
  });

  it("a payment completing while the chain is read is no difference: the books are compared up to the block read", async () => {
    await payAndSettle([300]);
    const rail = stack.core.settlement.evm("base")!;
    let late: string[] = [];
    // The payment settles (mined in later blocks, booked completed) between the chain's reads and the books'.
    const racing: EvmRail = {
      ...rail,
      transfers: async (from, to) => {
        const logs = await rail.transfers(from, to);
        if (late.length === 0) late = await payAndSettle([450]);
        return logs;
      },
    };
    const r = await verifyChains(stack.core.db, [racing]);
    expect(late).to.have.length(1);
    expect(r.differences.map((d) => d.message)).to.deep.equal([]);
    const mined = await stack.core.db("settlement_payments").where({ payment_id: late[0] }).first("mined_block");
    expect(BigInt(mined.mined_block) > r.chains[0]!.toBlock, "mined after the blocks read").to.equal(true);
    expect(r.chains[0]!.ledgerOutflowUnits).to.equal(r.chains[0]!.outgoingUnits);
    expect((await stack.admin.audit.verifyChains({})).ok).to.equal(true);
  });

  it("names a payment whose booked amount was altered, with both amounts", async () => {
    const [id] = await payAndSettle([700]);
    const row = await stack.core.db("settlement_payments").where({ payment_id: id }).first();
    await stack.core.db("settlement_payments").where({ payment_id: id }).update({ amount_cents: 701 });
    try {
      const r = await stack.admin.audit.verifyChains({});
      expect(r.ok).to.equal(false);
      expect(r.differences).to.have.length(1);
      expect(r.differences[0]).to.deep.include({
        chain: "base",
        check: "amount_mismatch",
        paymentId: id,
        txHash: row.tx_hash.toLowerCase(),
        chainUnits: `${centsToUnits(700)}`,
        booksUnits: `${centsToUnits(701)}`,
      });
    } finally {
      await stack.core.db("settlement_payments").where({ payment_id: id }).update({ amount_cents: 700 });
    }
    expect((await stack.admin.audit.verifyChains({})).ok).to.equal(true);
  });

  it("names a transfer sent from the hot wallet outside Vaultgate", async () => {
    const rail = createEvmRail(stack.core.settlement.evm("base")!.settings, account);
    const txHash = await sendOutsideVaultgate(anvil, rail, 4_200_000n);
    const r = await stack.admin.audit.verifyChains({});
    expect(r.ok).to.equal(false);
    const checks = r.differences.map((d) => d.check);
    expect(checks).to.include.members(["transfer_without_payment", "ledger_mismatch"]);
    const stray = r.differences.find((d) => d.check === "transfer_without_payment")!;
    expect(stray).to.deep.include({ chain: "base", txHash, paymentId: "", chainUnits: "4200000", booksUnits: "0" });
    expect(stray.message).to.include(txHash);
  });
});
