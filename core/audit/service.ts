import type { ServiceImpl } from "@connectrpc/connect";
import type { AuditService } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import type { CursorCodec } from "../paging.js";
import type { AuditStore } from "./store.js";
import type { LedgerStore } from "../ledger/store.js";
import { listRecords, tailRecords } from "./records.js";
import { verifyChains, verifyLedger, type ChainVerifier } from "./verify.js";

export interface AuditServiceDeps {
  store: AuditStore;
  cursors: CursorCodec;
  /** The ledger `VerifyLedger` proves. */
  ledger: LedgerStore;
  /** The hot wallets `VerifyChains` compares with the chain (settlement provides it; audit imports no room that writes audit rows). */
  settlement: ChainVerifier;
  /** How often a tail looks for new records. */
  tailPollMs?: number;
}

/**
 * Assembles AuditService from its handlers: the audit feed (records.ts) and the ledger and
 * chain proofs (verify.ts). Each handler takes only the dependencies it uses.
 */
export function createAuditService(deps: AuditServiceDeps): ServiceImpl<typeof AuditService> {
  const { store, cursors, ledger, settlement } = deps;
  const pollMs = deps.tailPollMs ?? 250;

  return {
    listRecords: (req) => listRecords({ store, cursors }, req),
    tailRecords: (req, ctx) => tailRecords({ store, pollMs }, req, ctx),
    verifyLedger: () => verifyLedger({ ledger }),
    verifyChains: (req) => verifyChains({ settlement }, req),
  };
}
