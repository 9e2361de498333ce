import { expect } from "chai";
import type { Hex } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import { createEvmRail, type EvmRail } from "../../core/settlement/evm-rail.js";
import { centsToUnits } from "../../core/settlement/rules.js";
import type { Anvil } from "../support/anvil.js";
import { evmRailStackOptions, fundHotWallet, payOnBase, sendOutsideVaultgate, startEvmChain } from "../support/evm-rail.js";
import { startMcpStack, type McpStack } from "../support/mcp.js";
import { expectRefused } from "../support/refusals.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * `ledger verify --chains` from a start block (CHAIN_<NAME>_START_BLOCK, or a one-run
 * override): what happened before it is summed, not compared transfer by transfer, and
 * never shows as a difference.
 */
describe("books that match the chain, from a start block (anvil)", function () {
  this.timeout(180_000);
  let anvil: Anvil;
  let stack: McpStack;
  let usdc: Hex;
  let account: PrivateKeyAccount;
  let rail: EvmRail;
  let start: number;
  let strayHash: string;

  const latest = async () => Number(await anvil.client.getBlockNumber({ cacheTime: 0 }));
  /** A send from the hot wallet made with its key outside Vaultgate. */
  const stray = (units: bigint) => sendOutsideVaultgate(anvil, rail, units);

  before(async () => {
    const chain = await startEvmChain();
    ({ anvil, usdc, account } = chain);
    rail = createEvmRail(chain.settings, account);
    // Before the start block: a deposit and a send the books never saw.
    await fundHotWallet(anvil, usdc, account.address, 5_000_000n);
    strayHash = await stray(1_000_000n);
    start = (await latest()) + 1;
    await anvil.mintUsdc(usdc, account.address, centsToUnits(10_000_000));
    stack = await startMcpStack(evmRailStackOptions({ ...chain.settings, startBlock: start }));
  });
  after(async () => {
    await stack?.close();
    await anvil?.stop();
  });

  /** Pays `amounts` from a fresh funded budget on base and settles them to completed; answers their mined blocks. */
  async function payAndSettle(amounts: number[]): Promise<number[]> {
    const ids = await payOnBase(stack, anvil, amounts);
    const rows = await stack.core.db("settlement_payments").whereIn("payment_id", ids);
    for (const row of rows) expect(row.status, row.payment_id).to.equal("completed");
    return rows.map((r) => Number(r.mined_block));
  }

  it("reads from the configured start block: clean books, also asked many times at once, and the earlier send is not compared", async () => {
    await payAndSettle([1_500, 250]);
    const results = await Promise.all(Array.from({ length: 8 }, () => stack.admin.audit.verifyChains({})));
    for (const r of results) {
      expect(r.differences.map((d) => d.message)).to.deep.equal([]);
      expect(r.chains[0]).to.deep.include({ chain: "base", fromBlock: BigInt(start), openingBalanceUnits: "4000000" });
    }
    // From block 0 for one run, the send made before the start block is named again.
    const all = await stack.admin.audit.verifyChains({ fromBlock: { "*": 0n } });
    expect(all.chains[0]!.fromBlock).to.equal(0n);
    expect(all.differences.map((d) => [d.check, d.txHash])).to.deep.include(["transfer_without_payment", strayHash]);
  });

  it("a start block after deposits and payments gives no false finding; a later stray send is still named", async () => {
    const mined = await payAndSettle([700, 300]);
    await anvil.mintUsdc(usdc, account.address, 2_000_000n);
    const later = Math.max(...mined) + 1;
    const clean = await stack.admin.audit.verifyChains({ fromBlock: { base: BigInt(later) } });
    expect(clean.differences.map((d) => d.message)).to.deep.equal([]);
    expect(clean.chains[0]!.openingBalanceUnits).to.equal(`${await rail.usdcBalance(undefined, later - 1)}`);

    const hash = await stray(3_000_000n);
    const r = await stack.admin.audit.verifyChains({ fromBlock: { base: BigInt(later) } });
    expect(r.differences.map((d) => [d.check, d.txHash])).to.deep.include.members([
      ["transfer_without_payment", hash],
      ["ledger_mismatch", ""],
    ]);
    expect(r.differences.map((d) => d.check)).to.not.include("balance_mismatch");
  });

  it("a start block after the latest block is named; an override for a chain not on the evm rail is refused", async () => {
    const ahead = (await latest()) + 1_000;
    const r = await stack.admin.audit.verifyChains({ fromBlock: { base: BigInt(ahead) } });
    expect(r.ok).to.equal(false);
    expect(r.differences).to.have.length(1);
    expect(r.differences[0]).to.deep.include({ chain: "base", check: "start_block_ahead" });
    for (const chain of ["sol", "eth", "BASE", "", "base\u0000"]) {
      await expectRefused(stack.admin.audit.verifyChains({ fromBlock: { [chain]: 1n } }), Reason.INVALID_REQUEST, /^from_block/);
    }
  });
});
