import type { MessageInitShape } from "@bufbuild/protobuf";
import type { VerifyChainsRequest, VerifyChainsResponseSchema, VerifyLedgerResponseSchema } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { LedgerStore } from "../ledger/store.js";

/** What `VerifyChains` asks of settlement. */
export interface ChainVerifier {
  railOf(chain: string): string;
  evmChains(): string[];
  verifyChains(fromBlock: ReadonlyMap<string, number>): Promise<MessageInitShape<typeof VerifyChainsResponseSchema>>;
}

export interface VerifyLedgerDeps {
  /** The ledger `VerifyLedger` proves. */
  ledger: LedgerStore;
}

export interface VerifyChainsDeps {
  /** The hot wallets `VerifyChains` compares with the chain (settlement provides it; audit imports no room that writes audit rows). */
  settlement: ChainVerifier;
}

/** AuditService.VerifyLedger: whether the ledger balances, with what was checked and any discrepancies. */
export async function verifyLedger(deps: VerifyLedgerDeps): Promise<MessageInitShape<typeof VerifyLedgerResponseSchema>> {
  const r = await deps.ledger.verify();
  return {
    ok: r.discrepancies.length === 0,
    transactions: BigInt(r.transactions),
    postings: BigInt(r.postings),
    accounts: BigInt(r.accounts),
    discrepancies: r.discrepancies,
  };
}

/** AuditService.VerifyChains: checks `from_block` (per evm chain, or "*" for the rest) and asks settlement. */
export async function verifyChains(deps: VerifyChainsDeps, req: VerifyChainsRequest): Promise<MessageInitShape<typeof VerifyChainsResponseSchema>> {
  const fromBlock = new Map<string, number>();
  const every = Object.hasOwn(req.fromBlock, "*") ? req.fromBlock["*"] : undefined;
  for (const [chain, block] of Object.entries(req.fromBlock)) {
    if (chain === "*") continue;
    if (deps.settlement.railOf(chain) !== "evm")
      fail(Reason.INVALID_REQUEST, `from_block names ${JSON.stringify(chain.slice(0, 40))}, which is not a chain on the evm rail`);
    if (block > BigInt(Number.MAX_SAFE_INTEGER)) fail(Reason.INVALID_REQUEST, `from_block for ${chain} must be at most ${Number.MAX_SAFE_INTEGER}`);
    fromBlock.set(chain, Number(block));
  }
  if (every !== undefined) {
    if (every > BigInt(Number.MAX_SAFE_INTEGER)) fail(Reason.INVALID_REQUEST, `from_block must be at most ${Number.MAX_SAFE_INTEGER}`);
    for (const chain of deps.settlement.evmChains()) if (!fromBlock.has(chain)) fromBlock.set(chain, Number(every));
  }
  return deps.settlement.verifyChains(fromBlock);
}
