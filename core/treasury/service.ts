import type { ServiceImpl } from "@connectrpc/connect";
import type { TreasuryService } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { PartnersStore } from "../partners/store.js";
import type { PartnerAccess } from "../partners/access.js";
import type { PartnerTokenVerifier } from "../partners/access-token.js";
import { bindTreasury, fundTreasury, setTreasuryStatus } from "./admin.js";
import { executeBatch, type TreasuryFaults } from "./batches.js";
import { getPayout, getTreasury } from "./reads.js";
import type { TreasuryStore } from "./store.js";

export type { TreasuryFaults };

export interface TreasuryServiceDeps {
  db: Db;
  store: TreasuryStore;
  partners: PartnersStore;
  /** The partner access checks: token, partner active, rate limit, user and consent. */
  access: PartnerAccess;
  audit: AuditStore;
  clock: () => Date;
  /** Names the partner of an edge-rejected request (signature and lifetime only). */
  tokens: PartnerTokenVerifier;
  faults?: TreasuryFaults;
}

/** Assembles TreasuryService: each RPC is a handler of its own module, given the deps it needs. */
export function createTreasuryService(deps: TreasuryServiceDeps): ServiceImpl<typeof TreasuryService> {
  return {
    bindTreasury: (req, ctx) => bindTreasury(deps, req, ctx),
    setTreasuryStatus: (req, ctx) => setTreasuryStatus(deps, req, ctx),
    fundTreasury: (req, ctx) => fundTreasury(deps, req, ctx),
    getTreasury: (req, ctx) => getTreasury(deps, req, ctx),
    executeBatch: (req, ctx) => executeBatch(deps, req, ctx),
    getPayout: (req, ctx) => getPayout(deps, req, ctx),
  };
}
